"""The fragment kernels for one-device placements (the hot path), with the GPU terms read from tables.

`fragment.py` compares every GPU with every task type ((rows x GPUs x types) arrays, a dozen operations
for the state before and as many for each GPU's state after). Types that ask the same GPU milli per
device see the same GPUs as big enough, and what a GPU adds to `big` (its free milli where it is big
enough) and to the count of big-enough GPUs is a function of its free milli alone: a table over free
milli 0..1000 and the K distinct sizes (openb's 29 typical types ask 5). A one-device placement changes
one GPU, so the state after it is the state before plus that GPU's before/after table rows. Where every
type asks one device, a type fits exactly where the node admits it (model, free CPU) and `big` is not
zero, so the counts are left out of the table.

The result is `fragment.py`'s, bit for bit: the per-type sum is formed from the same values in the same
order (`fragment._sum_weighted`), only its inputs come from fewer and smaller operations. The
incremental placer calls these on a handful of rows per decision, where numpy's per-operation overhead,
not arithmetic, is the cost. Pods on several devices keep `fragment.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.state.backend import ArrayNamespace

Array = Any
_BIG_KEY = 1 << 40


@dataclass(frozen=True)
class SizeTables:
    """The typical workload's GPU sizes (milli per device) and the per-GPU terms by free milli."""

    size: Array  # int64[M]: the size index of type m (K for CPU-only types: an all-zero column)
    # float64[1001, K + 1], or [1001, 2 (K + 1)] with multi-device types: f where a GPU with f free milli
    # holds size k, else 0; then (multi) 1 where it holds size k, else 0 (the count of such GPUs)
    table: Array
    devices: Array | None  # float64[M] devices of each type (multi-device workloads only)
    both: Array | None  # int64[2M]: `size` then `size` + K + 1 (multi-device workloads only)
    floor: Array  # int64 zero, for `maximum`
    nil: Array  # float64 zero, for `where`

    @classmethod
    def build(cls, xp: ArrayNamespace, milli: list[int], count: list[int]) -> SizeTables:
        sizes = sorted({mu for mu in milli if mu > 0})
        index = {mu: k for k, mu in enumerate(sizes)}
        size = [index.get(mu, len(sizes)) for mu in milli]
        multi = any(k > 1 for mu, k in zip(milli, count, strict=True) if mu > 0)
        rows = []
        for f in range(MILLI_PER_GPU + 1):
            row = [float(f) if f >= mu else 0.0 for mu in sizes] + [0.0]
            if multi:
                row += [1.0 if f >= mu else 0.0 for mu in sizes] + [0.0]
            rows.append(row)
        ints = xp.int64
        return cls(
            size=xp.asarray(size, dtype=ints) if milli else xp.zeros((0,), dtype=ints),
            table=xp.asarray(rows, dtype=xp.float64),
            devices=xp.asarray([float(k) for k in count], dtype=xp.float64) if multi else None,
            both=xp.asarray(size + [k + len(sizes) + 1 for k in size], dtype=ints) if multi else None,
            floor=xp.zeros((), dtype=ints),
            nil=xp.zeros((), dtype=xp.float64),
        )


def _lookup(xp: ArrayNamespace, t: SizeTables, free: Array) -> Array:
    """float64[..., columns]: the table rows of `free` int64[...] (at most 1000 milli; below 0, where a pod
    does not fit, read as 0)."""
    idx = xp.maximum(free, t.floor)
    flat = xp.take(t.table, xp.reshape(idx, (-1,)), axis=0)
    return xp.reshape(flat, (*free.shape, int(t.table.shape[1])))


def _rows_of(xp: ArrayNamespace, t: SizeTables, milli: Array) -> Array:
    """float64[R, columns]: the table rows of `milli` int64[R], known to be within 0..1000."""
    return xp.take(t.table, milli, axis=0)


def admits(xp: ArrayNamespace, access: Array, cpu_free: Array, type_cpu: Array) -> Array:
    """bool[R, M]: the node accepts type m's model and has its CPU (CPU-only types read `big` 0)."""
    return access & (cpu_free[:, None] >= type_cpu[None, :])


def _weighted(xp: ArrayNamespace, t: SizeTables, ok: Array, sums: Array, weight: Array) -> Array:
    """sum_m p_m x [type m fits] x big_m over the last axis, from the per-size sums (table columns summed
    over a node's GPUs). With multi-device types, m fits where the node admits it and has enough big GPUs;
    else where it admits it (a one-device type with no big GPU has big_m = 0)."""
    axis = len(sums.shape) - 1
    if t.both is None or t.devices is None:
        per_type = xp.take(sums, t.size, axis=axis)
    else:
        m = int(t.size.shape[0])
        taken = xp.take(sums, t.both, axis=axis)
        per_type = taken[..., :m]
        ok = ok & (taken[..., m:] >= t.devices)
    # where(ok, x, 0) x p equals x x where(ok, p, 0) bit for bit (x and p finite, >= 0: both products are
    # x p or +0.0), and the mask is applied where `ok` is smallest ([R, 1, M] for a fraction's [R, G, M]).
    return xp.sum(per_type * xp.where(ok, weight, t.nil), axis=-1)


@dataclass
class SizeState:
    total: Array  # float64[R] free milli
    per_gpu: Array  # float64[R, G, columns] each GPU's table row
    big: Array  # float64[R, columns] their sums


def size_state(xp: ArrayNamespace, t: SizeTables, free: Array, total: Array | None = None) -> SizeState:
    """`total`: int64[R] the rows' free milli, when the caller has it."""
    per_gpu = _lookup(xp, t, free)
    total = xp.sum(free, axis=1) if total is None else total
    return SizeState(xp.astype(total, xp.float64), per_gpu, xp.sum(per_gpu, axis=1))


def fragment_of(
    xp: ArrayNamespace, t: SizeTables, s: SizeState, ok: Array, weight: Array, weight_sum: float
) -> Array:
    """float64[R]: F of each row, `ok` bool[R, M] from `admits`."""
    return s.total * weight_sum - _weighted(xp, t, ok, s.big, weight)


def fraction_after(
    xp: ArrayNamespace,
    t: SizeTables,
    s: SizeState,
    free: Array,
    need: Array,
    ok_after: Array,
    weight: Array,
    weight_sum: float,
) -> Array:
    """float64[R, G]: F after `need` int64[R] milli go on GPU g (meaningless where it does not fit)."""
    big = s.big[:, None, :] - s.per_gpu + _lookup(xp, t, free - need[:, None])
    total = s.total - xp.astype(need, xp.float64)
    return total[:, None] * weight_sum - _weighted(xp, t, ok_after[:, None, :], big, weight)


def one_device_after(
    xp: ArrayNamespace,
    t: SizeTables,
    s: SizeState,
    free: Array,
    need: Array,
    ok_after: Array,
    weight: Array,
    weight_sum: float,
) -> tuple[Array, Array]:
    """(F after float64[R], the pod fits bool[R]) when one device takes `need` milli on the best-fit GPU
    (the fitting GPU with the least free milli, as `fragment.best_fit_selection` with count 1)."""
    fit = free >= need[:, None]
    least = xp.min(xp.where(fit, free, xp.full((), _BIG_KEY, dtype=xp.int64)), axis=1)
    ok = least < _BIG_KEY
    chosen = xp.where(ok, least, need)  # rows it does not fit: any value in range (masked by `ok`)
    big = s.big - _rows_of(xp, t, chosen) + _rows_of(xp, t, chosen - need)  # need <= chosen <= 1000
    total = s.total - xp.astype(need, xp.float64)
    return total * weight_sum - _weighted(xp, t, ok_after, big, weight), ok
