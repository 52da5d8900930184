"""Drive the real scheduling loop against the simulated cluster until the work is done (or `until`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.cycle import Scheduler
from scheduler.sim.cluster import SimCluster


@dataclass
class SimResult:
    end_s: float
    cycles: int
    wall_s: float
    events: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[tuple[float, float]] = field(default_factory=list)  # (time_s, GPU allocated %)
    bound: int = 0
    cycle_s: list[float] = field(default_factory=list)
    # Ended before `until_s` because nothing was left to happen: no arrival, completion or graceful
    # deletion to come, and the last cycle placed and evicted nothing (pods that run for ever, or wait).
    quiet: bool = False


def run_simulation(
    sim: SimCluster,
    scheduler: Scheduler,
    *,
    until_s: float | None = None,
    period_s: float = 1.0,
    progress: Callable[[float, float], None] | None = None,
) -> SimResult:
    """Cycle every `period_s` of simulated time; idle stretches are skipped to the next arrival or
    completion (nothing can change in between). Stops at `until_s`, or when nothing is left to happen."""
    import time

    t_wall = time.perf_counter()
    result = SimResult(end_s=0.0, cycles=0, wall_s=0.0)
    horizon = until_s if until_s is not None else float("inf")
    t = 0.0
    while t <= horizon:
        sim.advance(t)
        cycle = scheduler.run_cycle()
        result.cycles += 1
        result.bound += cycle.bound
        result.cycle_s.append(cycle.duration_s)
        result.events.extend(cycle.events)
        state = scheduler.cache.state
        capacity = state.gpu_capacity()
        pct = 100.0 * state.allocated_milli() / (capacity * MILLI_PER_GPU) if capacity else 0.0
        result.timeline.append((t, pct))
        nxt = sim.next_event_s()
        if cycle.retry_at_epoch_s is not None:  # e.g. a victim's minimum runtime ends: decide again then
            retry = cycle.retry_at_epoch_s - (sim.epoch_s() - sim.now_s)
            nxt = retry if nxt is None else min(nxt, retry)
        if progress is not None:
            progress(t, nxt if nxt is not None else t)
        changed = cycle.bound > 0 or cycle.evicted > 0
        if nxt is None and not changed:
            result.quiet = True
            break
        t = t + period_s if changed or nxt is None else max(t + period_s, nxt)
    result.end_s = min(t, horizon) if until_s is not None else sim.now_s
    result.wall_s = time.perf_counter() - t_wall
    result.events.extend(sim.log)
    result.events.sort(key=lambda e: (e["time_s"], e["type"]))
    return result


def top_reasons(sim: SimCluster, n: int = 5) -> list[tuple[str, int]]:
    counts: Counter[str] = Counter()
    for rec in sim.pods.values():
        phase = (rec.obj.get("status") or {}).get("phase")
        if phase == "Pending" and rec.obj["metadata"].get("uid") and rec.reason:
            counts[rec.reason[1]] += 1
    return counts.most_common(n)
