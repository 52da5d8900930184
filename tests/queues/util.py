"""Measuring helpers for the queue tests: GPUs per queue, evictions per cycle, whole-gang checks."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from scheduler.api.keys import POD_GROUP, QUEUE_LABEL
from scheduler.cycle import CycleResult, Scheduler
from scheduler.sim.cluster import SimCluster
from tests.framework.helpers import assignment, phase

GRACE_S = 30  # an evicted pod's terminationGracePeriodSeconds in the simulated cluster (Kubernetes' default)


def gpus_by_queue(sim: SimCluster) -> dict[str, float]:
    """GPUs held by running pods, per queue, from the assignments written on the pods."""
    out: dict[str, float] = defaultdict(float)
    for key, rec in sim.pods.items():
        if phase(sim, key) != "Running":
            continue
        a = assignment(sim, key)
        q = rec.obj["metadata"]["labels"][QUEUE_LABEL]
        out[q] += sum(g.milli for g in a.gpus) / 1000 if a else 0.0
    return dict(out)


def running_members(sim: SimCluster) -> dict[str, set[str]]:
    """Running pods per pod group (namespace/name)."""
    groups: dict[str, set[str]] = defaultdict(set)
    for key, rec in sim.pods.items():
        group = (rec.obj["metadata"].get("annotations") or {}).get(POD_GROUP)
        if group and phase(sim, key) == "Running":
            groups[f"{rec.obj['metadata']['namespace']}/{group}"].add(key)
    return groups


class Recorder:
    """Runs cycles and checks, every cycle, that an eviction never takes part of a gang and that every
    pending pod carries a reason."""

    def __init__(self, sim: SimCluster, sched: Scheduler) -> None:
        self.sim, self.sched = sim, sched
        self.events: list[dict[str, Any]] = []
        self.gang_evictions = 0

    def cycle(self, dt: float = 1.0) -> CycleResult:
        self.sim.advance(self.sim.now_s + dt)
        before = running_members(self.sim)
        result = self.sched.run_cycle()
        evicted = {e["pod"] for e in result.events if e["type"] == "Evicted"}
        for group, members in before.items():
            hit = members & evicted
            assert not hit or hit == members, f"gang {group}: evicted {sorted(hit)} of {sorted(members)}"
            self.gang_evictions += bool(hit)
        self.events.extend(result.events)
        for key, pod_rec in self.sim.pods.items():  # every pod that waits says why
            waiting = pod_rec.obj["metadata"].get("uid") and phase(self.sim, key) == "Pending"
            if waiting and pod_rec.arrival_s < self.sim.now_s:  # (not one recreated after this cycle ran)
                assert pod_rec.reason is not None, f"pending pod {key} has no reason"
        return result

    def run(self, cycles: int, dt: float = 1.0) -> None:
        for _ in range(cycles):
            self.cycle(dt)

    def evictions(self, action: str | None = None) -> list[dict[str, Any]]:
        return [
            e for e in self.events if e["type"] == "Evicted" and (action is None or e["action"] == action)
        ]
