"""Small builders for scheduler tests: a simulated cluster from a few objects, run cycles, inspect."""

from __future__ import annotations

from typing import Any

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.sim.builtin import node, pod, podgroup, queue
from scheduler.sim.cluster import SimCluster
from scheduler.sim.loader import Manifests

A100 = ("A100", 40960)
T4 = ("T4", 15360)

__all__ = ["A100", "T4", "assignment", "cluster", "node", "pod", "podgroup", "queue", "run"]


def cluster(
    objects: list[dict[str, Any]], *, policy: str = "binpack", backend: str = "numpy"
) -> tuple[SimCluster, Scheduler]:
    m = Manifests()
    for o in objects:
        m.objects[o["kind"]].append(o)
    sim = SimCluster.from_manifests(m)
    return sim, Scheduler(sim, SchedulerConfig(policy=policy, backend=backend))


def run(sim: SimCluster, sched: Scheduler, cycles: int = 1, dt: float = 1.0) -> None:
    for _ in range(cycles):
        sim.advance(sim.now_s + dt)
        sched.run_cycle()


def assignment(sim: SimCluster, key: str) -> GPUAssignment | None:
    raw = (sim.pods[key].obj["metadata"].get("annotations") or {}).get(GPU_ASSIGNMENT)
    return GPUAssignment.from_annotation(raw) if raw else None


def phase(sim: SimCluster, key: str) -> str:
    return str((sim.pods[key].obj.get("status") or {}).get("phase"))
