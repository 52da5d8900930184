"""`dotprod`: Tetris-style alignment of the pod's demand with the node's free resources.

Both vectors are normalised by the node's capacity, (CPU, GPU); for a one-device fraction the GPU
dimension is the best-fit GPU's free share, otherwise the node's free GPU share. As in the FGD paper's
simulator the score is 100 * (1 - dot / 2), truncated: the smaller the product, the fuller the node
already is in the dimensions the pod needs. Equal scores are ordered by best fit (`tiebreak.py`);
GPUs inside the node: best fit.
"""

from __future__ import annotations

from typing import ClassVar

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.placement.base_policy import BasePolicy
from scheduler.placement.bestfit import BestFitPolicy
from scheduler.placement.policy import Array
from scheduler.placement.tiebreak import with_tiebreak
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays


class DotProductPolicy(BasePolicy):
    name: ClassVar[str] = "dotprod"

    def __init__(self) -> None:
        self._bestfit = BestFitPolicy()

    def score_nodes(self, state: NodeArrays, d: PodDemand, feasible: Array, fit: Array) -> Array:
        xp = state.xp
        f64 = xp.float64
        cpu_cap = xp.astype(xp.maximum(state.total_cpu, xp.ones_like(state.total_cpu)), f64)
        cpu_dot = (d.cpu_milli / cpu_cap) * (xp.astype(state.free_cpu, f64) / cpu_cap)
        n_gpus = xp.sum(xp.astype(state.present & state.healthy, xp.int64), axis=1)
        gpu_cap = xp.astype(xp.maximum(n_gpus, xp.ones_like(n_gpus)) * MILLI_PER_GPU, f64)
        if d.num_gpus == 1 and not d.whole:
            big = float(1 << 40)
            free = xp.astype(state.free_milli, f64)
            best = xp.min(xp.where(fit, free, xp.full(free.shape, big, dtype=f64)), axis=1)
            best = xp.where(best < big, best, xp.zeros_like(best))
            gpu_dot = (d.gpu_milli / MILLI_PER_GPU) * (best / MILLI_PER_GPU)
        else:
            want = float(d.num_gpus * d.gpu_milli)
            gpu_dot = (want / gpu_cap) * (xp.astype(self._bestfit.free_gpu_milli(state), f64) / gpu_cap)
        score = xp.trunc(100.0 * (1.0 - (cpu_dot + gpu_dot) / 2.0))
        return with_tiebreak(self._bestfit, state, d, feasible, fit, score)
