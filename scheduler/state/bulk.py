"""Scatter-add in array-API terms, for writing a burst of placements to the state in one array program."""

from __future__ import annotations

from typing import Any

from scheduler.backend import ArrayNamespace


def segment_totals(xp: ArrayNamespace, keys: list[int], values: list[list[int]], size: int) -> list[Any]:
    """Dense int64[size] totals of each value list grouped by key (sort, cumulative sums, segment ends,
    then searchsorted to spread the totals over all `size` cells)."""
    if not keys:
        return [xp.zeros((size,), dtype=xp.int64) for _ in values]
    k = xp.asarray(keys, dtype=xp.int64)
    order = xp.argsort(k, stable=True)
    k = xp.take(k, order)
    last = xp.concat([k[1:] != k[:-1], xp.ones((1,), dtype=xp.bool)])
    ends = xp.nonzero(last)[0]
    uniq = xp.take(k, ends)
    cells = xp.arange(size, dtype=xp.int64)
    pos = xp.clip(xp.searchsorted(uniq, cells), 0, int(uniq.shape[0]) - 1)
    hit = xp.take(uniq, pos) == cells
    out = []
    for vals in values:
        v = xp.take(xp.asarray(vals, dtype=xp.int64), order)
        cs = xp.cumulative_sum(v)
        at_end = xp.take(cs, ends)
        seg = at_end - xp.concat([xp.zeros((1,), dtype=xp.int64), at_end[:-1]])
        out.append(xp.where(hit, xp.take(seg, pos), xp.zeros((size,), dtype=xp.int64)))
    return out
