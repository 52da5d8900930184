"""Gangs and evictions: no action ever evicts part of a gang; a gang stuck below minMember is evicted whole."""

import random

import pytest

from scheduler.api.keys import GPU_FRACTION, POD_GROUP
from scheduler.model.reasons import Reason
from scheduler.sim.cluster import SimCluster
from scheduler.sim.runner import run_simulation
from tests.framework.helpers import A100, cluster, node, phase, pod, podgroup, queue
from tests.queues.util import GRACE_S, Recorder


def gang(name: str, q: str, size: int, gpus: int, *, arrival_s: float, priority: str = "train",
         grace: float | None = None) -> list[dict]:  # fmt: skip
    pg = podgroup(name, q, q, size)
    pg["spec"]["priorityClassName"] = priority
    if grace is not None:
        pg["spec"]["staleGraceSeconds"] = grace
    return [pg] + [
        pod(f"{name}-{i}", q, arrival_s=arrival_s, duration_s=10_000, gpus=gpus, priority_class=priority,
            annotations={POD_GROUP: name})
        for i in range(size)
    ]  # fmt: skip


def test_reclaim_evicts_gangs_whole():
    objs = [*(node(f"n{i}", A100, 4, 64, 512) for i in range(2)), queue("a", None, 0), queue("b", None, 4)]
    for g in range(4):
        objs += gang(f"g{g}", "a", 2, 1, arrival_s=g)
    objs += [pod(f"b-{i}", "b", arrival_s=10, duration_s=10_000, gpus=1) for i in range(3)]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(15 + GRACE_S)
    # b needs 3 GPUs: two whole gangs (4 GPUs) go, the youngest first; one GPU stays idle for b's quota.
    assert sorted(e["pod"] for e in rec.evictions("reclaim")) == ["a/g2-0", "a/g2-1", "a/g3-0", "a/g3-1"]
    assert rec.gang_evictions == 2
    assert all(phase(sim, f"b/b-{i}") == "Running" for i in range(3))


def test_preempt_evicts_a_lower_priority_gang_whole_for_a_higher_priority_gang():
    objs = [node("n0", A100, 4, 64, 512), queue("q", None, 4)]
    objs += gang("low", "q", 4, 1, arrival_s=0)
    objs += gang("high", "q", 2, 1, arrival_s=5, priority="build-preemptible")
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(10 + GRACE_S)
    assert sorted(e["pod"] for e in rec.evictions("preempt")) == [f"q/low-{i}" for i in range(4)]
    assert all(e["beneficiary"] == "q/high" for e in rec.evictions())
    assert phase(sim, "q/high-0") == "Running" and phase(sim, "q/high-1") == "Running"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_action_ever_evicts_part_of_a_gang(seed):
    rng = random.Random(seed)
    objs = [*(node(f"n{i}", A100, 4, 64, 512) for i in range(3)),
            queue("a", None, 4, weight=1), queue("b", None, 4, weight=2), queue("c", None, 2)]  # fmt: skip
    for g in range(6):
        q = rng.choice("abc")
        objs += gang(f"g{g}", q, rng.randint(2, 3), rng.choice([1, 2]), arrival_s=rng.randint(0, 20),
                     priority=rng.choice(["train", "build-preemptible"]))  # fmt: skip
    for i in range(20):
        q = rng.choice("abc")
        extra = {"annotations": {GPU_FRACTION: "0.5"}} if rng.random() < 0.5 else {"gpus": 1}
        objs.append(pod(f"p{i}", q, arrival_s=rng.randint(0, 30), duration_s=rng.randint(10, 40), cpu="1",
                        priority_class=rng.choice(["train", "build-preemptible", "build"]), **extra))  # fmt: skip
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(60)  # Recorder asserts, cycle by cycle, that evicted gangs were evicted whole
    assert rec.evictions(), "the workload is meant to cause evictions"
    assert rec.gang_evictions >= 1


def fail(sim: SimCluster, key: str) -> None:
    """The pod's container exits with an error (the simulator has no failures of its own)."""
    rec = sim.pods[key]
    rec.obj["status"] = {"phase": "Failed"}
    rec.finished_s = sim.now_s
    sim._emit("Pod", "MODIFIED", rec.obj)


def test_stale_gang_is_evicted_whole_after_its_grace_period():
    objs = [node("n0", A100, 4, 64, 512), queue("q", None, 4), *gang("ddp", "q", 3, 1, arrival_s=0, grace=10)]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(3)
    fail(sim, "q/ddp-1")
    rec.run(9)
    assert rec.evictions() == []
    status = sim.group_status["q/ddp"]
    assert status.running == 2 and status.conditions[0].reason == Reason.GANG_BELOW_MIN_MEMBER
    assert "runs 2 of 3 members; evicted whole in 2s" in status.conditions[0].message
    rec.run(3)
    ev = rec.evictions("stale_gang")
    assert sorted(e["pod"] for e in ev) == ["q/ddp-0", "q/ddp-2"]
    assert 13 <= ev[0]["time_s"] <= 14 and "ran 2 of 3 members" in ev[0]["message"]


def test_simulate_advances_to_the_end_of_a_stale_gangs_grace_period():
    """Nothing else happens after the member fails: the simulation still runs a cycle when the grace ends."""
    objs = [node("n0", A100, 4, 64, 512), queue("q", None, 4), *gang("ddp", "q", 3, 1, arrival_s=0, grace=10)]
    sim, sched = cluster(objs)
    Recorder(sim, sched).run(3)
    fail(sim, "q/ddp-1")
    result = run_simulation(sim, sched, until_s=3600)
    evicted = [e for e in result.events if e["type"] == "Evicted"]
    assert len(evicted) == 2 and all(e["action"] == "stale_gang" and 13 <= e["time_s"] <= 14 for e in evicted)


def test_finished_members_keep_a_gang_whole():
    objs = [node("n0", A100, 4, 64, 512), queue("q", None, 4), *gang("ddp", "q", 3, 1, arrival_s=0, grace=5)]
    objs[-1]["metadata"]["annotations"]["tessera.dev/sim-duration"] = "3s"  # one worker finishes early
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(20)
    assert phase(sim, "q/ddp-2") == "Succeeded"
    assert rec.evictions() == [] and phase(sim, "q/ddp-0") == "Running"
