"""Several seeds of one policy, aggregated the way the paper reports them."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.replay.curve import Curve, mean_curve
from scheduler.replay.protocol import DEFAULT_TUNE, Moves, SeedResult, capacity_milli, replay_seed
from scheduler.replay.trace import TraceNode, TracePod
from scheduler.state.backend import ArrayNamespace


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
    def consolidated(self) -> bool:
        return any(s.moves is not None for s in self.seeds)

    @property
    def moves(self) -> int:
        return sum(s.moves.moved for s in self.seeds if s.moves is not None)

    @property
    def moves_per_placed(self) -> float:
        """Pods moved per pod placed, up to the last record of bin 100, over all seeds."""
        placed = sum(s.moves.placed for s in self.seeds if s.moves is not None)
        return self.moves / placed if placed else 0.0

    @property
    def curve(self) -> Curve:
        return mean_curve([s.curve for s in self.seeds])

    def to_json(self) -> dict[str, Any]:
        elapsed = self.elapsed_s
        doc = {
            "policy": self.policy,
            "protocol": "consolidate" if self.consolidated else "strict",
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
                    "placed_fractions_at_100": {str(k): v for k, v in s.placed_fractions.items()},
                }
                | ({} if s.moves is None else {"consolidation": _moves_json(s.moves)})
                for s in self.seeds
            ],
            "curve": self.curve.points(),
        }
        if self.consolidated:
            doc["moves_at_100"] = self.moves
            doc["moves_per_placed_pod"] = round(self.moves_per_placed, 5)
        return doc


def _moves_json(m: Moves) -> dict[str, Any]:
    return {
        "moves": m.moved,
        "placed": m.placed,
        "moves_per_placed_pod": round(m.per_placed, 5),
        "placed_by_moves": m.consolidated,
        "searched": m.searched,
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
    consolidate: bool = False,
) -> PolicyResult:
    """`on_seed_progress(seed, done, total)` is called while a seed runs (for progress bars).
    `consolidate`: pods may move (`consolidate.py`), not the published protocol."""
    results: list[SeedResult] = []
    for seed in seeds:
        cb = None if on_seed_progress is None else functools.partial(on_seed_progress, seed)
        results.append(
            replay_seed(
                xp,
                nodes,
                pods,
                policy,
                seed,
                tune=tune,
                progress=cb,
                until_pct=until_pct,
                consolidate=consolidate,
            )
        )
    return PolicyResult(policy, capacity_milli(nodes) // MILLI_PER_GPU, tune, results)
