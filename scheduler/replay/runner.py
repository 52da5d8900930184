"""Several seeds of one policy, aggregated the way the paper reports them."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.backend import ArrayNamespace
from scheduler.replay.curve import Curve, mean_curve
from scheduler.replay.protocol import DEFAULT_TUNE, SeedResult, capacity_milli, replay_seed
from scheduler.replay.trace import TraceNode, TracePod


@dataclass
class PolicyResult:
    policy: str
    capacity_gpus: int
    tune: float
    seeds: list[SeedResult]

    @property
    def attempted(self) -> int:
        return sum(s.attempted for s in self.seeds)

    @property
    def failed(self) -> int:
        return sum(s.failed for s in self.seeds)

    @property
    def elapsed_s(self) -> float:
        return sum(s.elapsed_s for s in self.seeds)

    @property
    def unallocated(self) -> list[float]:
        return [s.unallocated_at_100 for s in self.seeds]

    @property
    def mean_unallocated(self) -> float:
        return statistics.fmean(self.unallocated)

    @property
    def sd_unallocated(self) -> float:
        values = self.unallocated
        return statistics.stdev(values) if len(values) > 1 else 0.0

    @property
    def curve(self) -> Curve:
        return mean_curve([s.curve for s in self.seeds])

    def to_json(self) -> dict[str, Any]:
        elapsed = self.elapsed_s
        return {
            "policy": self.policy,
            "seeds": [s.seed for s in self.seeds],
            "tune": self.tune,
            "capacity_gpus": self.capacity_gpus,
            "pods_attempted": self.attempted,
            "pods_failed": self.failed,
            "elapsed_s": round(elapsed, 3),
            "pods_per_s": round(self.attempted / elapsed, 1) if elapsed > 0 else None,
            "unallocated_pct_at_100": round(self.mean_unallocated, 4),
            "unallocated_pct_at_100_sd": round(self.sd_unallocated, 4),
            "per_seed": [
                {
                    "seed": s.seed,
                    "pods_attempted": s.attempted,
                    "pods_failed": s.failed,
                    "elapsed_s": round(s.elapsed_s, 3),
                    "unallocated_pct_at_100": round(s.unallocated_at_100, 4),
                }
                for s in self.seeds
            ],
            "curve": self.curve.points(),
        }


def run_policy(
    xp: ArrayNamespace,
    nodes: Sequence[TraceNode],
    pods: Sequence[TracePod],
    policy: str,
    seeds: Sequence[int],
    *,
    tune: float = DEFAULT_TUNE,
    on_seed_progress: Callable[[int, int, int], None] | None = None,
    until_pct: int | None = None,
) -> PolicyResult:
    """`on_seed_progress(seed, done, total)` is called while a seed runs (for progress bars)."""
    results: list[SeedResult] = []
    for seed in seeds:
        cb = None if on_seed_progress is None else functools.partial(on_seed_progress, seed)
        results.append(
            replay_seed(xp, nodes, pods, policy, seed, tune=tune, progress=cb, until_pct=until_pct)
        )
    return PolicyResult(policy, capacity_milli(nodes) // MILLI_PER_GPU, tune, results)
