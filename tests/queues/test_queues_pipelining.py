"""Invariants of victims that terminate before their GPU is reused, over the built-in demo (reclaim,
preemption and consolidation all happen in it): at every cycle no GPU holds more than itself counting the
victims still terminating, no pod is both bound and waiting for a reserved place, and every pod told it
is pipelined has its place reserved."""

from __future__ import annotations

import pytest

from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.reasons import Reason
from scheduler.sim.builtin import builtin_manifests
from scheduler.sim.cluster import SimCluster
from tests.scheduler.helpers import assignment, phase


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
