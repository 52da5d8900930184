"""Invariants of victims that terminate before their GPU is reused, over the built-in demo (reclaim,
preemption and consolidation all happen in it): at every cycle no GPU holds more than itself counting the
victims still terminating, no pod is both bound and waiting for a reserved place, and every pod told it
is pipelined has its place reserved."""

from __future__ import annotations

import pytest

from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.model.reasons import Reason
from scheduler.sim.builtin import builtin_manifests
from scheduler.sim.cluster import SimCluster
from tests.framework.helpers import A100, assignment, cluster, node, phase, pod, queue


@pytest.mark.parametrize("policy", ["binpack", "fgd"])
def test_pipelining_never_overfills_a_gpu(policy: str) -> None:
    sim = SimCluster.from_manifests(builtin_manifests(7))
    sched = Scheduler(sim, SchedulerConfig(policy=policy, backend="numpy", expected_nodes=64))
    pipelined = evictions = 0
    for t in range(0, 2400, 3):
        sim.advance(float(t))
        result = sched.run_cycle()
        pipelined += sum(1 for e in result.events if e["type"] == "Pipelined")
        evictions += result.evicted
        use: dict[tuple[str, int], int] = {}
        for key in sim.pods:
            a = assignment(sim, key)
            if a is not None and phase(sim, key) == "Running":  # bound, victims still terminating included
                for g in a.gpus:
                    use[(a.node, g.index)] = use.get((a.node, g.index), 0) + g.milli
        assert all(milli <= 1000 for milli in use.values()), (t, {k: v for k, v in use.items() if v > 1000})
        ledger = sched.cache.ledger
        waiting = {r.uid for r in ledger.reservations().values() if r.uid is not None}
        assert not waiting & ledger.pods.keys(), t  # never both bound and waiting for its place
        for uid, why in result.reasons.items():
            if why.reason is Reason.PIPELINED:
                assert uid in waiting, (t, sched.cache.pods[uid].key)
    assert evictions > 0 and pipelined > 0  # the run did pipeline


def _reclaim_scene() -> tuple[SimCluster, Scheduler]:
    """a (quota 0) runs 2 GPUs; b (quota 2) asks for one: a's youngest pod is evicted, b's is pipelined."""
    objs = [node("n0", A100, 2, 64, 512), queue("a", None, 0), queue("b", None, 2)]
    objs += [pod(f"a-{i}", "a", arrival_s=i, duration_s=10_000, gpus=1, cpu="1") for i in range(2)]
    objs.append(pod("b-0", "b", arrival_s=5, duration_s=10_000, gpus=1, cpu="1"))
    return cluster(objs)


def test_a_reservation_whose_victim_never_terminates_is_dropped_with_a_reason() -> None:
    sim, sched = _reclaim_scene()
    for t in range(7):
        sim.advance(float(t))
        sched.run_cycle()
    assert sim.pods["b/b-0"].reason[0] == Reason.PIPELINED and sim.pods["a/a-1"].deleting is not None
    sim._deletions.clear()  # the victim's node never confirms its deletion (stuck terminating)
    drops = []
    for t in range(7, 7 + 30 + 60 + 3):
        sim.advance(float(t))
        drops += [e for e in sched.run_cycle().events if e["type"] == "ReservationDropped"]
    assert [e["pod"] for e in drops] == ["b/b-0"]
    assert "the pods it waited for are still terminating" in drops[0]["message"]
    assert phase(sim, "b/b-0") == "Pending"
    assert sum(1 for k in sim.pods if phase(sim, k) == "Running") == 2  # nothing bound onto the stuck GPU


def test_a_reservation_whose_pod_is_gone_is_dropped() -> None:
    sim, sched = _reclaim_scene()
    for t in range(7):
        sim.advance(float(t))
        sched.run_cycle()
    assert sched.cache.ledger.reservations()
    gone = sim.pods.pop("b/b-0")  # its owner deleted it while it waited
    sim._emit("Pod", "DELETED", gone.obj)
    sim.advance(8.0)
    events = sched.run_cycle().events
    assert [e["pod"] for e in events if e["type"] == "ReservationDropped"] == ["b/b-0"]
    assert sched.cache.ledger.reservations() == {}
