"""`bestfit`: the node left with the least free CPU and GPU after the pod, as the FGD paper's baseline.

Raw score (simulator's definition): 100 * (1 - (0.5 * cpu_left/128 cores + 0.5 * gpu_left/8 GPUs)),
truncated to an integer, then min-max normalised over the feasible nodes to 0..100 with integer
division. The integer steps make near-equal nodes tie; ties are broken by the caller.
"""

from __future__ import annotations

from typing import ClassVar

from scheduler.backend import ArrayNamespace
from scheduler.placement.policy import Array, rank_gpus
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand

MAX_SPEC_CPU = 128_000.0  # milli-CPU
MAX_SPEC_GPU = 8_000.0  # milli-GPU
NODE_SCORE_MAX = 100


def free_gpu_milli(xp: ArrayNamespace, state: ClusterState) -> Array:
    """int64[N]: free GPU milli summed over a node's usable GPUs."""
    usable = state.present & state.healthy
    return xp.sum(
        xp.where(usable, xp.astype(state.free_milli, xp.int64), xp.zeros(usable.shape, dtype=xp.int64)),
        axis=1,
    )


def normalize(xp: ArrayNamespace, raw: Array, feasible: Array) -> Array:
    """Integer min-max normalisation to 0..100 over feasible rows (all 0 when every row is equal)."""
    big = 1 << 40
    lo = xp.min(xp.where(feasible, raw, xp.full(raw.shape, big, dtype=xp.int64)))
    hi = xp.max(xp.where(feasible, raw, xp.full(raw.shape, -big, dtype=xp.int64)))
    span = hi - lo
    if int(span) <= 0:
        return xp.zeros(raw.shape, dtype=xp.float64)
    return xp.astype((raw - lo) * NODE_SCORE_MAX // span, xp.float64)


class BestFitPolicy:
    name: ClassVar[str] = "bestfit"

    def score_nodes(
        self, xp: ArrayNamespace, state: ClusterState, d: PodDemand, feasible: Array, fit: Array
    ) -> Array:
        cpu_left = xp.astype(state.free_cpu - d.cpu_milli, xp.float64)
        gpu_left = xp.astype(free_gpu_milli(xp, state) - d.num_gpus * d.gpu_milli, xp.float64)
        waste = 0.5 * cpu_left / MAX_SPEC_CPU + 0.5 * gpu_left / MAX_SPEC_GPU
        raw = xp.astype(xp.trunc((1.0 - waste) * NODE_SCORE_MAX), xp.int64)  # Go's int64() truncates
        return normalize(xp, raw, feasible)

    def pick_gpus(
        self, xp: ArrayNamespace, state: ClusterState, row: int, d: PodDemand, fit: Array
    ) -> list[int]:
        return rank_gpus(xp, state.free_milli[row, :], fit[row, :], d.num_gpus, ascending=True)

    def observe(self, state: ClusterState) -> None:
        return None
