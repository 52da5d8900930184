"""Small builders for scheduler tests: a simulated cluster from a few objects, run cycles, inspect."""

from __future__ import annotations

from typing import Any

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.framework.eviction import EvictionPolicy
from scheduler.sim.builtin import node, pod, podgroup, queue
from scheduler.sim.cluster import SimCluster
from scheduler.sim.loader import Manifests

A100 = ("A100", 40960)
T4 = ("T4", 15360)

__all__ = [
    "A100",
    "T4",
    "assert_arrays_match_world",
    "assignment",
    "cluster",
    "node",
    "pod",
    "podgroup",
    "queue",
    "run",
    "world_gpu_use",
]


def cluster(
    objects: list[dict[str, Any]],
    *,
    policy: str = "binpack",
    backend: str = "numpy",
    eviction: EvictionPolicy | None = None,
) -> tuple[SimCluster, Scheduler]:
    m = Manifests()
    for o in objects:
        m.objects[o["kind"]].append(o)
    sim = SimCluster.from_manifests(m)
    config = SchedulerConfig(policy=policy, backend=backend, eviction=eviction or EvictionPolicy())
    return sim, Scheduler(sim, config)


def run(sim: SimCluster, sched: Scheduler, cycles: int = 1, dt: float = 1.0) -> None:
    for _ in range(cycles):
        sim.advance(sim.now_s + dt)
        sched.run_cycle()


def assignment(sim: SimCluster, key: str) -> GPUAssignment | None:
    raw = (sim.pods[key].obj["metadata"].get("annotations") or {}).get(GPU_ASSIGNMENT)
    return GPUAssignment.from_annotation(raw) if raw else None


def phase(sim: SimCluster, key: str) -> str:
    return str((sim.pods[key].obj.get("status") or {}).get("phase"))


def world_gpu_use(sim: SimCluster, *, terminating: bool = True) -> dict[tuple[str, int], tuple[int, int]]:
    """(milli, MiB) per (node, GPU index) over the pods the simulated cluster runs, from their assignments:
    what really runs where, computed from scratch (never from the scheduler's books). `terminating=False`
    leaves out pods being deleted (evicted victims in their grace period: on their GPU, out of the plan)."""
    use: dict[tuple[str, int], tuple[int, int]] = {}
    for rec in sim.pods.values():
        meta, spec, status = rec.obj["metadata"], rec.obj.get("spec") or {}, rec.obj.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") not in ("Pending", "Running"):
            continue
        if not terminating and meta.get("deletionTimestamp"):
            continue
        raw = (meta.get("annotations") or {}).get(GPU_ASSIGNMENT)
        if not raw:
            continue
        a = GPUAssignment.from_annotation(raw)
        for g in a.gpus:
            milli, mib = use.get((a.node, g.index), (0, 0))
            use[(a.node, g.index)] = (milli + g.milli, mib + g.memory_mib)
    return use


def assert_arrays_match_world(
    sim: SimCluster, sched: Scheduler, unknown: frozenset[str] = frozenset()
) -> None:
    """No GPU over 1000 milli or its memory, counting the pods still terminating on it, and the scheduler's
    arrays (the plan) equal what the other pods of the simulated cluster hold, GPU by GPU (reserved places
    of pods being moved or pipelined included). `unknown`: nodes the scheduler may not know (deleted
    before it started: their pods are accounted when the node registers again)."""
    state = sched.cache.state
    for (name, slot), (milli, mib) in world_gpu_use(sim).items():
        if name in unknown and state.row_of(name) is None:
            continue
        assert milli <= 1000, f"GPU {name}/{slot} over-committed: {milli} milli"
        row = state.row_of(name)
        assert row is not None, f"pods run on node {name}, which the scheduler does not know"
        total = int(state.total_mib[row, slot]) if bool(state.present[row, slot]) else 0
        assert mib <= total or not total, f"GPU {name}/{slot} memory over-committed: {mib} of {total} MiB"
    use = world_gpu_use(sim, terminating=False)
    for held in sched.cache.ledger.reserved.values():
        name = state.node_names[held.placement.node]
        for g in held.placement.gpus:
            milli, mib = use.get((str(name), g.slot), (0, 0))
            use[(str(name), g.slot)] = (milli + g.milli, mib + g.mib)
    for (name, slot), (_milli, mib) in use.items():
        if name in unknown and state.row_of(name) is None:
            continue
        row = state.row_of(name)
        assert row is not None, f"pods run on node {name}, which the scheduler does not know"
        assert bool(state.present[row, slot]), f"pods run on GPU {name}/{slot}, absent from the arrays"
        total = int(state.total_mib[row, slot])
        assert mib <= total, f"GPU {name}/{slot} memory over-committed: {mib} of {total} MiB"
    for row, name in enumerate(state.node_names):
        if name is None:
            continue
        for slot in range(state.max_gpus):
            if not bool(state.present[row, slot]):
                continue
            milli, mib = use.get((name, slot), (0, 0))
            free = int(state.free_milli[row, slot])
            assert free == 1000 - milli, f"GPU {name}/{slot}: {free} free milli, pods hold {milli}"
            assert int(state.free_mib[row, slot]) == int(state.total_mib[row, slot]) - mib, (name, slot)
