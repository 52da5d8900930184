"""Topology domains as array programs: per-node figures summed per domain, domains ranked for a gang.

A domain is a set of nodes sharing a path of topology labels down to one level (a zone, a rack, an NVLink
domain); `ClusterState.domain[:, col]` holds each node's domain code at one level (-1: outside the
topology). Everything here is a pure function of arrays, so the free capacity of every domain at a level
costs one sort and a cumulative sum over the node rows, whatever the number of domains:

- `segment_sum` adds a per-node figure into per-domain cells (rows with a negative code count nowhere);
- `pods_per_node` is how many pods of one demand each node can host now (KAI Scheduler's "allocatable
  pods" of a node: exact for whole GPUs and one-device fractions, an upper bound for a fraction on several
  devices, which the placement itself then checks exactly);
- `dominant_ratio` is KAI's job-to-free ratio of a domain: the largest share of a domain's free GPU, CPU
  or memory the whole gang would take (above 1: it cannot fit; a resource with nothing free: 1000);
- `domain_runs` sorts a topology's nodes by domain path once (kept until a node changes): every domain,
  at every level, is then a contiguous run, and `run_sums` gives all levels' per-domain sums from one
  cumulative sum; `ancestors` walks from a domain to the ones enclosing it;
- `order_by` sorts domains by several keys: KAI orders a level's domains by their ancestors' ratios first
  (it sorts the domain tree from the top), tightest first, ties by name.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from scheduler.state.backend import ArrayNamespace

Array = Any
NOT_IN_DOMAIN_RATIO = 1000.0  # KAI's ratio for a resource the domain has none of


def segment_sum(xp: ArrayNamespace, codes: Array, values: Array, size: int) -> Array:
    """int64[size] (or int64[size, K]): for each code 0..size-1 the sum of `values` (int64[N], or
    int64[N, K] for K figures at once) over the rows whose `codes` (int[N]) equal it. One sort by code,
    cumulative sums, and each segment's bounds by binary search: no scatter-add, which the array API
    lacks."""
    keys = xp.astype(codes, xp.int64)
    order = xp.argsort(keys, stable=True)
    keys = xp.take(keys, order)
    vals = xp.take(values, order, axis=0)
    head = xp.zeros((1, *vals.shape[1:]), dtype=xp.int64)
    sums = xp.concat([head, xp.cumulative_sum(vals, axis=0)], axis=0)
    cells = xp.arange(size, dtype=xp.int64)
    lo = xp.searchsorted(keys, cells, side="left")
    hi = xp.searchsorted(keys, cells, side="right")
    return xp.take(sums, hi, axis=0) - xp.take(sums, lo, axis=0)


def pods_per_node(
    xp: ArrayNamespace,
    mask: Array,
    fit: Array,
    free_milli: Array,
    free_mib: Array,
    free_cpu: Array,
    free_mem: Array,
    need: tuple[Array | None, Array | None, int, int, int],
    cap: int,
) -> Array:
    """int64[N]: pods of one demand each node can host now, at most `cap`; 0 outside `mask` (bool[N],
    the node fits one). fit bool[N, G] (the GPU fits one device-share), free_milli and free_mib int[N, G]
    (free_mib: the lower of accounting and the node report), free_cpu and free_mem int64[N].
    need = (milli int64[N, G], MiB int64[N, G] of one device-share, devices per pod, CPU milli, MiB);
    milli and MiB None for whole GPUs (a fitting GPU is then exactly one device-share)."""
    need_milli, need_mib, devices, cpu, mem = need
    n = xp.full(mask.shape, cap, dtype=xp.int64)
    if cpu:
        n = xp.minimum(n, free_cpu // cpu)
    if mem:
        n = xp.minimum(n, free_mem // mem)
    if devices:
        if need_milli is None or need_mib is None:
            shares = xp.sum(xp.astype(fit, xp.int64), axis=1)
        else:
            zero = xp.zeros(fit.shape, dtype=xp.int64)
            per_gpu = xp.minimum(
                xp.astype(free_milli, xp.int64) // xp.maximum(need_milli, xp.ones_like(need_milli)),
                free_mib // xp.maximum(need_mib, xp.ones_like(need_mib)),
            )
            shares = xp.sum(xp.where(fit, per_gpu, zero), axis=1)
        n = xp.minimum(n, shares // devices)
    return xp.where(mask, n, xp.zeros_like(n))


def dominant_ratio(xp: ArrayNamespace, request: tuple[int, int, int], free: Array) -> Array:
    """float64[D]: max over requested resources of request / free per domain (KAI's
    getJobRatioToFreeResources). request = the gang's total (GPU milli, CPU milli, MiB); free int64[D, 3],
    each domain's free amounts of the same. Domains with none of a requested resource get
    NOT_IN_DOMAIN_RATIO."""
    asked = [k for k in range(3) if request[k] > 0]
    if not asked:
        return xp.zeros((int(free.shape[0]),), dtype=xp.float64)
    want = xp.asarray([float(request[k]) for k in asked], dtype=xp.float64)
    have = xp.astype(xp.take(free, xp.asarray(asked, dtype=xp.int64), axis=1), xp.float64)  # [D, R]
    ratio = xp.where(have > 0, want / xp.where(have > 0, have, xp.ones_like(have)), NOT_IN_DOMAIN_RATIO)
    return xp.max(ratio, axis=1)


def order_by(xp: ArrayNamespace, keys: list[Array]) -> Array:
    """int64[K]: the permutation that sorts K items by `keys` (each [K]; the first most significant,
    all ascending), as successive stable sorts from the least significant key."""
    k = int(keys[0].shape[0])
    order = xp.arange(k, dtype=xp.int64)
    for key in reversed(keys):
        order = xp.take(order, xp.argsort(xp.take(key, order), stable=True))
    return order


class Runs(NamedTuple):
    """A topology's nodes sorted by domain path, so that every domain, at every level, is one contiguous
    run of them: per-domain sums are then differences of one cumulative sum (`run_sums`)."""

    order: Array  # int64[M]: the topology's node rows, sorted by domain path
    starts: list[Array]  # per level, int64[R]: where each domain's run starts in `order`
    ends: list[Array]  # per level, int64[R]: where it ends (exclusive)
    codes: list[Array]  # per level, int64[R]: each run's domain code
    parent: list[Array]  # per level, int64[R]: the run of the enclosing domain one level up (level 0: 0)
    all_starts: Array  # int64[sum of R]: `starts` of every level, concatenated (one take for all levels)
    all_ends: Array


def domain_runs(xp: ArrayNamespace, rows: Array, codes: Array) -> Runs:
    """The runs of the nodes `rows` (int64[M]) whose domain codes per level are `codes` (int[M, L],
    outermost level first, none negative). Codes name paths, so a change of the level-k code between two
    sorted rows is a domain boundary at level k (and at every level below)."""
    levels = int(codes.shape[1])
    c64 = xp.astype(codes, xp.int64)
    order_m = order_by(xp, [c64[:, k] for k in range(levels)])
    order = xp.take(rows, order_m)
    sorted_codes = xp.take(c64, order_m, axis=0)
    m = int(rows.shape[0])
    starts: list[Array] = []
    ends: list[Array] = []
    run_codes: list[Array] = []
    parent: list[Array] = []
    for k in range(levels):
        col = sorted_codes[:, k]
        new = xp.concat([xp.ones((min(m, 1),), dtype=xp.bool), col[1:] != col[:-1]])
        s = xp.astype(xp.nonzero(new)[0], xp.int64)
        starts.append(s)
        ends.append(xp.concat([s[1:], xp.full((min(m, 1),), m, dtype=xp.int64)]))
        run_codes.append(xp.take(col, s))
        up = starts[k - 1] if k else xp.zeros((1,), dtype=xp.int64)
        parent.append(xp.searchsorted(up, s, side="right") - 1)
    return Runs(order, starts, ends, run_codes, parent, xp.concat(starts), xp.concat(ends))


def run_sums(xp: ArrayNamespace, runs: Runs, values: Array) -> Array:
    """int64[sum of R, K]: the sums of `values` (int64[C, K] over all node rows) over each domain of
    every level, the levels one after the other (`split_levels` cuts them apart)."""
    vals = xp.take(values, runs.order, axis=0)
    head = xp.zeros((1, *vals.shape[1:]), dtype=xp.int64)
    cs = xp.concat([head, xp.cumulative_sum(vals, axis=0)], axis=0)
    return xp.take(cs, runs.all_ends, axis=0) - xp.take(cs, runs.all_starts, axis=0)


def split_levels(runs: Runs, per_run: Array) -> list[Array]:
    """Cut an array over the runs of every level (first axis) into one per level."""
    out, at = [], 0
    for s in runs.starts:
        n = int(s.shape[0])
        out.append(per_run[at : at + n, ...])
        at += n
    return out


def ancestors(xp: ArrayNamespace, runs: Runs, level: int, index: Array, top: int) -> list[Array]:
    """For runs `index` (int64[K]) of `level`, their enclosing runs at levels top..level (the last is
    `index` itself)."""
    out = [index]
    for k in range(level, top, -1):
        out.append(xp.take(runs.parent[k], out[-1]))
    return out[::-1]
