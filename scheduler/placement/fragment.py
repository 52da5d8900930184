"""Fragment of a node for a typical workload, as array programs over (rows x GPUs x task types).

For task type m (GPU milli per device mu_m, devices k_m, CPU c_m, popularity p_m) the fragment of a node is
all of its free GPU milli when m cannot run there (a CPU-only type, a model it does not accept, too little
free CPU, fewer than k_m GPUs with at least mu_m free), else the free milli of the GPUs too small for m.
F(node) = sum_m p_m * fragment_m(node). Writing `big_m` for the free milli on GPUs with >= mu_m free,
fragment_m = total - big_m when m fits and `total` otherwise, which is what every kernel below computes.

Rows are whatever the caller passes: all nodes, the few a placement touched, or one per distinct node
state. Hypothetical states after a placement are derived from the current one without copying the
cluster: a fraction changes one GPU, so counts and sums move by that GPU's before/after terms only.
"""

from __future__ import annotations

from typing import Any

from scheduler.placement.workload import WorkloadArrays
from scheduler.state.backend import ArrayNamespace

Array = Any
BIG_KEY = 1 << 40


def _sum_weighted(xp: ArrayNamespace, wa: WorkloadArrays, fits: Array, big: Array) -> Array:
    """sum_m p_m * [fits_m] * big_m over the last axis."""
    zero = xp.zeros_like(big)
    return xp.sum(xp.astype(xp.where(fits, big, zero), xp.float64) * wa.weight, axis=-1)


def base_ok(xp: ArrayNamespace, wa: WorkloadArrays, access: Array, cpu_free: Array) -> Array:
    """bool[R, M]: type m is a GPU type the node accepts and has CPU for (GPU room checked apart)."""
    return access & (cpu_free[:, None] >= wa.cpu[None, :]) & (wa.milli > 0)[None, :]


def fragment(xp: ArrayNamespace, wa: WorkloadArrays, free: Array, cpu_free: Array, access: Array) -> Array:
    """float64[R]: F for each row. free int64[R, G] (absent/unhealthy GPUs 0), cpu_free int64[R],
    access bool[R, M] (see `WorkloadArrays.access`)."""
    total = xp.astype(xp.sum(free, axis=1), xp.float64)
    ge = free[:, :, None] >= wa.milli[None, None, :]
    cnt = xp.sum(xp.astype(ge, xp.int64), axis=1)
    big = xp.sum(xp.where(ge, free[:, :, None], xp.zeros_like(free)[:, :, None]), axis=1)
    fits = base_ok(xp, wa, access, cpu_free) & (cnt >= wa.count[None, :])
    return total * xp.sum(wa.weight) - _sum_weighted(xp, wa, fits, big)


def fragment_after_fraction(
    xp: ArrayNamespace,
    wa: WorkloadArrays,
    free: Array,
    cpu_free: Array,
    access: Array,
    need: Array,
    cpu_need: int,
) -> tuple[Array, Array]:
    """(F before: float64[R], F after putting `need` milli on GPU g: float64[R, G]) for a one-device
    fraction. need int64[R] (milli per row; rows differ only when the pod asks memory, not milli)."""
    zero3 = xp.zeros_like(free)[:, :, None]
    mu = wa.milli[None, None, :]
    total = xp.astype(xp.sum(free, axis=1), xp.float64)
    ge = free[:, :, None] >= mu
    cnt = xp.sum(xp.astype(ge, xp.int64), axis=1)
    big = xp.sum(xp.where(ge, free[:, :, None], zero3), axis=1)
    weight_sum = xp.sum(wa.weight)
    fits_before = base_ok(xp, wa, access, cpu_free) & (cnt >= wa.count[None, :])
    before = total * weight_sum - _sum_weighted(xp, wa, fits_before, big)

    after_free = free - need[:, None]
    ge_after = after_free[:, :, None] >= mu
    cnt_after = cnt[:, None, :] - xp.astype(ge, xp.int64) + xp.astype(ge_after, xp.int64)
    big_after = (
        big[:, None, :]
        - xp.where(ge, free[:, :, None], zero3)
        + xp.where(ge_after, after_free[:, :, None], zero3)
    )
    ok_after = base_ok(xp, wa, access, cpu_free - cpu_need)
    fits_after = ok_after[:, None, :] & (cnt_after >= wa.count[None, None, :])
    total_after = total - xp.astype(need, xp.float64)
    after = total_after[:, None] * weight_sum - _sum_weighted(xp, wa, fits_after, big_after)
    return before, after


def best_fit_selection(xp: ArrayNamespace, free: Array, fit: Array, count: int) -> Array:
    """bool[R, G]: the `count` fitting GPUs with the least free milli per row (ties: lower index)."""
    key = xp.where(fit, free, xp.full(free.shape, BIG_KEY, dtype=xp.int64))
    order = xp.argsort(key, axis=1, stable=True)
    rank = xp.argsort(order, axis=1, stable=True)
    return fit & (rank < count)


def fragment_after_selection(
    xp: ArrayNamespace,
    wa: WorkloadArrays,
    free: Array,
    cpu_free: Array,
    access: Array,
    take: Array,
    cpu_need: int,
) -> tuple[Array, Array]:
    """(F before, F after) when `take` int64[R, G] milli leave each GPU (whole GPUs, several devices,
    or a CPU-only pod with `take` all zero)."""
    before = fragment(xp, wa, free, cpu_free, access)
    after = fragment(xp, wa, free - take, cpu_free - cpu_need, access)
    return before, after
