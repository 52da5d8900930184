"""`bestfit`: the node left with the least free CPU and GPU after the pod, as the FGD paper's baseline.

Raw score (simulator's definition): 100 * (1 - (0.5 * cpu_left/128 cores + 0.5 * gpu_left/8 GPUs)),
truncated to an integer, then min-max normalised over the feasible nodes to 0..100 with integer
division. The integer steps make near-equal nodes tie; ties are broken by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from scheduler.placement.base_policy import BasePolicy
from scheduler.placement.policy import Array, changed_since, scatter_rows
from scheduler.state.backend import ArrayNamespace
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays

MAX_SPEC_CPU = 128_000.0  # milli-CPU
MAX_SPEC_GPU = 8_000.0  # milli-GPU
NODE_SCORE_MAX = 100


def _free_gpu_milli(state: NodeArrays, idx: Array | None = None) -> Array:
    xp = state.xp
    present, healthy, milli = state.present, state.healthy, state.free_milli
    if idx is not None:  # gather the rows first: the ops below then touch only them
        present, healthy, milli = (xp.take(a, idx, axis=0) for a in (present, healthy, milli))
    usable = present & healthy
    free = xp.astype(milli, xp.int64)
    return xp.sum(xp.where(usable, free, xp.zeros(usable.shape, dtype=xp.int64)), axis=1)


def _raw(xp: ArrayNamespace, free_cpu: Array, free_gpu: Array, d: PodDemand) -> Array:
    cpu_left = xp.astype(free_cpu - d.cpu_milli, xp.float64)
    gpu_left = xp.astype(free_gpu - d.num_gpus * d.gpu_milli, xp.float64)
    waste = 0.5 * cpu_left / MAX_SPEC_CPU + 0.5 * gpu_left / MAX_SPEC_GPU
    return xp.astype(xp.trunc((1.0 - waste) * NODE_SCORE_MAX), xp.int64)  # Go's int64() truncates


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


@dataclass
class _Cached:
    version: int
    shape: tuple[int, int]
    value: Array


class BestFitPolicy(BasePolicy):
    """Keeps, for the state it last scored, the free GPU milli per node and the raw scores per pod shape,
    patched on the rows whose row_version moved since (a placement is one row). A few rows (a re-scoring
    view) are not worth keeping."""

    name: ClassVar[str] = "bestfit"

    def __init__(self) -> None:
        self._state: NodeArrays | None = None
        self._free: _Cached | None = None
        self._raw: dict[tuple[int, int], _Cached] = {}

    def _caches_for(self, state: NodeArrays) -> bool:
        if state.capacity < 64:
            return False
        if self._state is not state:
            self._state, self._free, self._raw = state, None, {}
        return True

    def free_gpu_milli(self, state: NodeArrays) -> Array:
        """int64[N]: free GPU milli summed over a node's usable GPUs (shared: do not modify the result)."""
        if not self._caches_for(state):
            return _free_gpu_milli(state)
        xp, shape = state.xp, (state.capacity, state.max_gpus)
        cached = self._free
        if cached is not None and cached.shape == shape:
            if cached.version == state.version:
                return cached.value
            stale = changed_since(state, cached.version)
            if int(stale.shape[0]) <= state.capacity // 8:
                free = xp.asarray(cached.value, copy=True)  # results handed out before stay as they were
                scatter_rows(xp, free, stale, _free_gpu_milli(state, stale))
                self._free = _Cached(state.version, shape, free)
                return free
        free = _free_gpu_milli(state)
        self._free = _Cached(state.version, shape, free)
        return free

    def raw_scores(self, state: NodeArrays, d: PodDemand) -> Array:
        """int64[N]: the simulator's raw best-fit score of every node for `d` (before normalisation)."""
        xp = state.xp
        if not self._caches_for(state):
            return _raw(xp, state.free_cpu, self.free_gpu_milli(state), d)
        shape = (state.capacity, state.max_gpus)
        key = (d.cpu_milli, d.num_gpus * d.gpu_milli)  # the pod's shape: CPU, GPU milli in all
        cached = self._raw.get(key)
        if cached is not None and cached.shape == shape:
            if cached.version == state.version:
                return cached.value
            stale = changed_since(state, cached.version)
            if int(stale.shape[0]) <= state.capacity // 8:
                free = xp.take(self.free_gpu_milli(state), stale)
                scatter_rows(xp, cached.value, stale, _raw(xp, xp.take(state.free_cpu, stale), free, d))
                cached.version = state.version
                return cached.value
        raw = _raw(xp, state.free_cpu, self.free_gpu_milli(state), d)
        self._raw[key] = _Cached(state.version, shape, raw)
        return raw

    def score_nodes(self, state: NodeArrays, d: PodDemand, feasible: Array, fit: Array) -> Array:
        return normalize(state.xp, self.raw_scores(state, d), feasible)
