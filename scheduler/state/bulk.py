"""Scatter-add in array-API terms, for writing a burst of placements to the state in one array program."""

from __future__ import annotations

from typing import Any

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.model.types import Placement
from scheduler.state.backend import ArrayNamespace


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


def placement_totals(
    xp: ArrayNamespace, placements: list[Placement], shape: tuple[int, int]
) -> tuple[Any, Any, Any, Any, list[int]]:
    """What `placements` take in all, as dense arrays over the state's `shape` (rows, GPU slots):
    (milli int64[R, G], MiB int64[R, G], CPU milli int64[R], memory MiB int64[R], the rows touched)."""
    rows_n, g = shape
    keys: list[int] = []
    milli: list[int] = []
    mib: list[int] = []
    rows: list[int] = []
    cpu: list[int] = []
    mem: list[int] = []
    for pl in placements:
        rows.append(pl.node)
        cpu.append(pl.cpu_milli)
        mem.append(pl.memory_mib)
        for share in pl.gpus:
            keys.append(pl.node * g + share.slot)
            milli.append(share.milli)
            mib.append(share.mib)
    d_milli, d_mib = segment_totals(xp, keys, [milli, mib], rows_n * g)
    d_cpu, d_mem = segment_totals(xp, rows, [cpu, mem], rows_n)
    return xp.reshape(d_milli, shape), xp.reshape(d_mib, shape), d_cpu, d_mem, sorted(set(rows))


def arrays_agree(state: Any, placements: list[Placement]) -> bool:
    """Whether the state's free arrays are exactly its totals less `placements` (every holding), on every
    node row: the check that a failure left nothing behind in the arrays that the holdings do not explain."""
    xp = state.xp
    shape = (state.capacity, state.max_gpus)
    milli, mib, cpu, mem, _ = placement_totals(xp, placements, shape)
    present = state.present
    zero = xp.zeros(shape, dtype=xp.int64)
    free_milli = xp.where(present, MILLI_PER_GPU - milli, zero)
    free_mib = xp.where(present, state.total_mib - mib, zero)
    live = xp.asarray([n is not None for n in state.nodes] + [False] * (state.capacity - len(state.nodes)))
    return bool(
        xp.all(xp.astype(state.free_milli, xp.int64) == free_milli)
        and xp.all(state.free_mib == free_mib)
        and xp.all(xp.where(live, state.free_cpu - (state.total_cpu - cpu), xp.zeros_like(cpu)) == 0)
        and xp.all(xp.where(live, state.free_mem - (state.total_mem - mem), xp.zeros_like(mem)) == 0)
    )
