"""Scatter-add in array-API terms, for writing a burst of placements to the state in one array program."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.model.types import Placement
from scheduler.state.backend import ArrayNamespace
from scheduler.state.codebook import Codebook


class Books(Protocol):
    """The state's codebooks and port matrix, as the totals need them."""

    @property
    def scalars(self) -> Codebook: ...
    @property
    def ports(self) -> Codebook: ...
    @property
    def port_use(self) -> Any: ...


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


@dataclass(frozen=True)
class Totals:
    """What a list of placements takes in all, as dense arrays over the state's rows (and GPU slots)."""

    milli: Any  # int64[R, G]
    mib: Any  # int64[R, G]
    cpu: Any  # int64[R]
    mem: Any  # int64[R] MiB
    pods: Any  # int64[R]: one slot per placement
    scalar: Any  # int64[R, K]: other resources, by the columns of the state's `scalars` codebook
    port: Any  # int64[R, P]: host ports bound, by the columns of the state's `ports` codebook
    rows: list[int]  # the rows touched, ascending


def placement_totals(
    xp: ArrayNamespace, placements: list[Placement], shape: tuple[int, int], books: Books, width: int
) -> Totals:
    """What `placements` take in all over the state's `shape` (rows, GPU slots) and `width` columns of
    other resources. Every resource and port the placements name must have a column in `books`."""
    scalars, ports = books.scalars, books.ports
    port_width = int(books.port_use.shape[1])
    p_keys: list[int] = []
    rows_n, g = shape
    keys: list[int] = []
    milli: list[int] = []
    mib: list[int] = []
    rows: list[int] = []
    cpu: list[int] = []
    mem: list[int] = []
    ones: list[int] = []
    s_keys: list[int] = []
    s_amount: list[int] = []
    for pl in placements:
        rows.append(pl.node)
        cpu.append(pl.cpu_milli)
        mem.append(pl.memory_mib)
        ones.append(1)
        for share in pl.gpus:
            keys.append(pl.node * g + share.slot)
            milli.append(share.milli)
            mib.append(share.mib)
        for name, amount in pl.scalars:
            col = scalars.get(name)
            assert col is not None, name
            s_keys.append(pl.node * width + col)
            s_amount.append(amount)
        for code in pl.ports:
            col = ports.get(code)
            assert col is not None, code
            p_keys.append(pl.node * port_width + col)
    d_milli, d_mib = segment_totals(xp, keys, [milli, mib], rows_n * g)
    d_cpu, d_mem, d_pods = segment_totals(xp, rows, [cpu, mem, ones], rows_n)
    (d_scalar,) = segment_totals(xp, s_keys, [s_amount], rows_n * width)
    d_scalar = xp.reshape(d_scalar, (rows_n, width))
    (d_port,) = segment_totals(xp, p_keys, [[1] * len(p_keys)], rows_n * port_width)
    d_port = xp.reshape(d_port, (rows_n, port_width))
    return Totals(
        xp.reshape(d_milli, shape), xp.reshape(d_mib, shape), d_cpu, d_mem, d_pods, d_scalar, d_port,
        sorted(set(rows)),
    )  # fmt: skip


def arrays_agree(state: Any, placements: list[Placement]) -> bool:
    """Whether the state's free arrays are exactly its totals less `placements` (every holding), on every
    node row: the check that a failure left nothing behind in the arrays that the holdings do not explain."""
    xp = state.xp
    shape = (state.capacity, state.max_gpus)
    t = placement_totals(xp, placements, shape, state, int(state.free_scalar.shape[1]))
    present = state.present
    zero = xp.zeros(shape, dtype=xp.int64)
    free_milli = xp.where(present, MILLI_PER_GPU - t.milli, zero)
    free_mib = xp.where(present, state.total_mib - t.mib, zero)
    live = xp.asarray([n is not None for n in state.nodes] + [False] * (state.capacity - len(state.nodes)))
    zero_row = xp.zeros_like(t.cpu)
    free_scalar = state.free_scalar - (state.total_scalar - t.scalar)
    return bool(
        xp.all(xp.astype(state.free_milli, xp.int64) == free_milli)
        and xp.all(state.free_mib == free_mib)
        and xp.all(xp.where(live, state.free_cpu - (state.total_cpu - t.cpu), zero_row) == 0)
        and xp.all(xp.where(live, state.free_mem - (state.total_mem - t.mem), zero_row) == 0)
        and xp.all(xp.where(live, state.free_pods - (state.total_pods - t.pods), zero_row) == 0)
        and xp.all(xp.where(live[:, None], free_scalar, xp.zeros_like(free_scalar)) == 0)
        and xp.all(xp.astype(state.port_use, xp.int64) == t.port)
    )
