"""What a simulation ended with: JSON for machines, rich tables for people."""

from __future__ import annotations

import json
from typing import Any

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT, MILLI_PER_GPU
from scheduler.cycle import Scheduler
from scheduler.sim.cluster import SimCluster
from scheduler.sim.runner import SimResult, top_reasons


def _pod_gpus(obj: dict[str, Any]) -> list[dict[str, int]]:
    raw = (obj["metadata"].get("annotations") or {}).get(GPU_ASSIGNMENT)
    if not raw:
        return []
    try:
        return [{"index": g.index, "milli": g.milli} for g in GPUAssignment.from_annotation(raw).gpus]
    except ValueError:
        return []


def stranded_milli(scheduler: Scheduler) -> int:
    """Idle GPU compute on GPUs that are partly used: free, but in pieces."""
    s = scheduler.cache.state
    xp = s.xp
    partial = s.present & s.valid[:, None] & (s.free_milli > 0) & (s.free_milli < MILLI_PER_GPU)
    return int(
        xp.sum(
            xp.where(partial, xp.astype(s.free_milli, xp.int64), xp.zeros_like(s.free_milli, dtype=xp.int64))
        )
    )


def summarize(sim: SimCluster, scheduler: Scheduler, result: SimResult) -> dict[str, Any]:
    state = scheduler.cache.state
    capacity = state.gpu_capacity()
    allocated = state.allocated_milli() / MILLI_PER_GPU
    pods = []
    phases: dict[str, int] = {}
    for key, rec in sorted(sim.pods.items()):
        if rec.obj["metadata"].get("uid") is None:
            continue  # not arrived yet
        ns, name = key.split("/", 1)
        phase = (rec.obj.get("status") or {}).get("phase", "Pending")
        phases[phase] = phases.get(phase, 0) + 1
        pods.append({
            "namespace": ns, "name": name, "phase": phase, "node": rec.obj.get("spec", {}).get("nodeName"),
            "gpus": _pod_gpus(rec.obj), "reason": rec.reason[1] if rec.reason and phase == "Pending" else None,
            "evictions": rec.evictions,
        })  # fmt: skip
    tree = scheduler.last_session.tree if scheduler.last_session else None
    queues = []
    for name, status in sorted(sim.queue_status.items()):
        node = tree.nodes.get(name) if tree else None
        quota = {r: getattr(node.spec.resources, r).quota for r in ("gpu", "cpu", "memory")} if node else {}
        queues.append({
            "name": name, "parent": node.parent if node else None, "allocated": status.allocated,
            "requested": status.requested, "fairShare": status.fair_share, "quota": quota,
        })  # fmt: skip
    cycles = sorted(result.cycle_s) or [0.0]
    return {
        "policy": scheduler.config.policy,
        "sim_time_s": round(result.end_s, 1),
        # Stopped before --until (or with no --until) because nothing was left to happen.
        "stopped_early": result.quiet,
        "wall_s": round(result.wall_s, 3),
        "cycles": result.cycles,
        "cycle_ms": {"p50": round(1000 * cycles[len(cycles) // 2], 3), "max": round(1000 * cycles[-1], 3)},
        "placements": result.bound,
        "placements_per_s": round(result.bound / result.wall_s, 1) if result.wall_s else None,
        "gpus": {
            "capacity": capacity,
            "allocated": round(allocated, 3),
            "allocated_pct": round(100 * allocated / capacity, 2) if capacity else 0.0,
        },
        "stranded_milli": stranded_milli(scheduler),
        "pods_by_phase": phases,
        "top_pending_reasons": [{"reason": r, "pods": n} for r, n in top_reasons(sim)],
        "pods": pods,
        "queues": queues,
        "events": result.events,
        "warnings": sim.warnings + scheduler.cache.errors,
        "timeline": [{"time_s": t, "allocated_pct": round(p, 2)} for t, p in result.timeline],
    }


def to_json(summary: dict[str, Any]) -> str:
    return json.dumps(summary, indent=2, default=str)
