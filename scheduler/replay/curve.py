"""Binning of a replay into the paper's allocation curve.

After each arrival the run records arrived and allocated GPU milli. The record goes to bin
round(100 x arrived / capacity) (half up); a bin's allocation % is the mean of 100 x allocated / capacity
over its records. A bin no record fell in (possible only on tiny clusters) takes the previous bin's value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MAX_BIN = 130


@dataclass(frozen=True)
class Curve:
    allocated_pct: tuple[float, ...]  # index = arrived % bin, 0..MAX_BIN

    def allocated_at(self, arrived_pct: int) -> float:
        return self.allocated_pct[arrived_pct]

    def points(self) -> list[dict[str, float]]:
        return [{"arrived_pct": i, "allocated_pct": round(v, 4)} for i, v in enumerate(self.allocated_pct)]


def bin_curve(arrived: Sequence[int], used: Sequence[int], capacity: int, max_bin: int = MAX_BIN) -> Curve:
    if capacity <= 0:
        raise ValueError("cluster GPU capacity is 0: nothing to bin against")
    sums = [0.0] * (max_bin + 1)
    counts = [0] * (max_bin + 1)
    for a, u in zip(arrived, used, strict=True):
        b = math.floor(100.0 * a / capacity + 0.5)
        if b > max_bin:
            continue
        sums[b] += 100.0 * u / capacity
        counts[b] += 1
    values: list[float] = []
    last = 0.0
    for s, c in zip(sums, counts, strict=True):
        last = s / c if c else last
        values.append(last)
    return Curve(tuple(values))


def mean_curve(curves: Sequence[Curve]) -> Curve:
    n = len(curves)
    return Curve(
        tuple(sum(c.allocated_pct[i] for c in curves) / n for i in range(len(curves[0].allocated_pct)))
    )
