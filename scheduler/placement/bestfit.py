"""`bestfit`: the node left with the least free CPU and GPU after the pod, as the FGD paper's baseline.

Raw score (simulator's definition): 100 * (1 - (0.5 * cpu_left/128 cores + 0.5 * gpu_left/8 GPUs)),
truncated to an integer, then min-max normalised over the feasible nodes to 0..100 with integer
division. The integer steps make near-equal nodes tie; ties are broken by the caller.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import ClassVar

from scheduler.backend import ArrayNamespace
from scheduler.placement.policy import Array, rank_gpus, scatter_rows
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand

MAX_SPEC_CPU = 128_000.0  # milli-CPU
MAX_SPEC_GPU = 8_000.0  # milli-GPU
NODE_SCORE_MAX = 100


def _free_gpu_milli(xp: ArrayNamespace, state: ClusterState, idx: Array | None = None) -> Array:
    present, healthy, milli = state.present, state.healthy, state.free_milli
    if idx is not None:  # gather the rows first: the ops below then touch only them
        present, healthy, milli = (xp.take(a, idx, axis=0) for a in (present, healthy, milli))
    usable = present & healthy
    free = xp.astype(milli, xp.int64)
    return xp.sum(xp.where(usable, free, xp.zeros(usable.shape, dtype=xp.int64)), axis=1)


@dataclass
class _FreeMilli:
    version: int
    shape: tuple[int, int]
    free: Array


# Per state: the last result, patched on the rows whose row_version moved since (a placement is one row).
_FREE_MILLI: weakref.WeakKeyDictionary[ClusterState, _FreeMilli] = weakref.WeakKeyDictionary()


def free_gpu_milli(xp: ArrayNamespace, state: ClusterState) -> Array:
    """int64[N]: free GPU milli summed over a node's usable GPUs (shared: do not modify the result)."""
    shape = (state.capacity, state.max_gpus)
    cached = _FREE_MILLI.get(state)
    if cached is not None and cached.shape == shape and state.capacity >= 64:
        if cached.version == state.version:
            return cached.free
        stale = xp.nonzero(state.row_version > cached.version)[0]
        if int(stale.shape[0]) <= state.capacity // 8:
            free = xp.asarray(cached.free, copy=True)  # results handed out before stay as they were
            scatter_rows(xp, free, stale, _free_gpu_milli(xp, state, stale))
            _FREE_MILLI[state] = _FreeMilli(state.version, shape, free)
            return free
    free = _free_gpu_milli(xp, state)
    if state.capacity >= 64:  # a few rows (a re-scoring view) are not worth keeping
        _FREE_MILLI[state] = _FreeMilli(state.version, shape, free)
    return free


def _raw(xp: ArrayNamespace, free_cpu: Array, free_gpu: Array, d: PodDemand) -> Array:
    cpu_left = xp.astype(free_cpu - d.cpu_milli, xp.float64)
    gpu_left = xp.astype(free_gpu - d.num_gpus * d.gpu_milli, xp.float64)
    waste = 0.5 * cpu_left / MAX_SPEC_CPU + 0.5 * gpu_left / MAX_SPEC_GPU
    return xp.astype(xp.trunc((1.0 - waste) * NODE_SCORE_MAX), xp.int64)  # Go's int64() truncates


@dataclass
class _RawScores:
    version: int
    shape: tuple[int, int]
    raw: Array


# Per state and pod shape (CPU, GPU milli in all): raw scores, patched on the rows that changed since.
_RAW: weakref.WeakKeyDictionary[ClusterState, dict[tuple[int, int], _RawScores]] = weakref.WeakKeyDictionary()


def raw_scores(xp: ArrayNamespace, state: ClusterState, d: PodDemand) -> Array:
    """int64[N]: the simulator's raw best-fit score of every node for `d` (before normalisation)."""
    if state.capacity < 64:  # a few rows: nothing to keep
        return _raw(xp, state.free_cpu, free_gpu_milli(xp, state), d)
    shape = (state.capacity, state.max_gpus)
    per_shape = _RAW.setdefault(state, {})
    key = (d.cpu_milli, d.num_gpus * d.gpu_milli)
    cached = per_shape.get(key)
    if cached is not None and cached.shape == shape:
        if cached.version == state.version:
            return cached.raw
        stale = xp.nonzero(state.row_version > cached.version)[0]
        if int(stale.shape[0]) <= state.capacity // 8:
            free = xp.take(free_gpu_milli(xp, state), stale)
            scatter_rows(xp, cached.raw, stale, _raw(xp, xp.take(state.free_cpu, stale), free, d))
            cached.version = state.version
            return cached.raw
    raw = _raw(xp, state.free_cpu, free_gpu_milli(xp, state), d)
    per_shape[key] = _RawScores(state.version, shape, raw)
    return raw


def normalize(xp: ArrayNamespace, raw: Array, feasible: Array) -> Array:
    """Integer min-max normalisation to 0..100 over feasible rows (all 0 when every row is equal)."""
    candidates = raw[feasible]  # min and max of the feasible rows only (fewer full-size arrays)
    if int(candidates.shape[0]) == 0:
        return xp.zeros(raw.shape, dtype=xp.float64)
    lo, hi = xp.min(candidates), xp.max(candidates)
    span = hi - lo
    if int(span) <= 0:
        return xp.zeros(raw.shape, dtype=xp.float64)
    return xp.astype((raw - lo) * NODE_SCORE_MAX // span, xp.float64)


class BestFitPolicy:
    name: ClassVar[str] = "bestfit"

    def score_nodes(
        self, xp: ArrayNamespace, state: ClusterState, d: PodDemand, feasible: Array, fit: Array
    ) -> Array:
        return normalize(xp, raw_scores(xp, state, d), feasible)

    def pick_gpus(
        self, xp: ArrayNamespace, state: ClusterState, row: int, d: PodDemand, fit: Array
    ) -> list[int]:
        return rank_gpus(xp, state.free_milli[row, :], fit[row, :], d.num_gpus, ascending=True)

    def observe(self, state: ClusterState) -> None:
        return None
