"""`packing` (GpuPacking in the FGD paper): share used GPUs first, then free GPUs of used nodes, then
free nodes, as integer score bands (the simulator's definition):

1. the pod fits on already-shared GPUs: 100 - (their free %)/10, at least 50;
2. it needs fully free GPUs of a node in use: 50 - (free GPUs taken), at least 33;
3. the node is entirely free: 33 - (its GPUs), at least its GPU count.
CPU-only pods score 0 everywhere. Equal scores are ordered by best fit (`tiebreak.py`); GPUs
inside the node: best fit.
"""

from __future__ import annotations

from typing import ClassVar

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.placement.base_policy import BasePolicy
from scheduler.placement.bestfit import BestFitPolicy
from scheduler.placement.fragment import best_fit_selection
from scheduler.placement.policy import Array
from scheduler.placement.tiebreak import with_tiebreak
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays


class GpuPackingPolicy(BasePolicy):
    name: ClassVar[str] = "packing"

    def __init__(self) -> None:
        self._bestfit = BestFitPolicy()

    def score_nodes(self, state: NodeArrays, d: PodDemand, feasible: Array, fit: Array) -> Array:
        xp = state.xp
        if not d.uses_gpu:
            zero = xp.zeros(feasible.shape, dtype=xp.float64)
            return with_tiebreak(self._bestfit, state, d, feasible, fit, zero)
        i64 = xp.int64
        usable = state.present & state.healthy
        free = xp.where(usable, xp.astype(state.free_milli, i64), xp.zeros(usable.shape, dtype=i64))
        full = usable & (free == MILLI_PER_GPU)
        n_gpus = xp.sum(xp.astype(usable, i64), axis=1)
        n_full = xp.sum(xp.astype(full, i64), axis=1)
        sel = best_fit_selection(xp, free, fit, d.num_gpus)
        full_used = xp.sum(xp.astype(sel & full, i64), axis=1)
        free_pct = xp.sum(xp.where(sel, free * 100 // MILLI_PER_GPU, xp.zeros_like(free)), axis=1)
        shared = xp.maximum(100 - free_pct // 10, xp.full(free_pct.shape, 50, dtype=i64))
        opens = xp.maximum(50 - full_used, xp.full(full_used.shape, 33, dtype=i64))
        empty = xp.maximum(33 - n_full, n_full)
        score = xp.where(n_full == n_gpus, empty, xp.where(full_used > 0, opens, shared))
        return with_tiebreak(self._bestfit, state, d, feasible, fit, xp.astype(score, xp.float64))
