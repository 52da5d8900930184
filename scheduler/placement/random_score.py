"""`random`: any feasible node, uniformly (the caller's random tie-break does the drawing); best-fit GPU."""

from __future__ import annotations

from typing import ClassVar

from scheduler.backend import ArrayNamespace
from scheduler.placement.policy import Array, rank_gpus
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand


class RandomPolicy:
    name: ClassVar[str] = "random"

    def score_nodes(
        self, xp: ArrayNamespace, state: ClusterState, d: PodDemand, feasible: Array, fit: Array
    ) -> Array:
        return xp.zeros(feasible.shape, dtype=xp.float64)

    def pick_gpus(
        self, xp: ArrayNamespace, state: ClusterState, row: int, d: PodDemand, fit: Array
    ) -> list[int]:
        return rank_gpus(xp, state.free_milli[row, :], fit[row, :], d.num_gpus, ascending=True)

    def observe(self, state: ClusterState) -> None:
        return None
