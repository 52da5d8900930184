"""`random`: any feasible node, uniformly (the caller's random tie-break does the drawing), and for a
fraction any GPU with room, uniformly (the FGD paper's Random baseline); whole GPUs: the first free ones.
"""

from __future__ import annotations

import random
from typing import ClassVar

from scheduler.backend import ArrayNamespace
from scheduler.placement.policy import Array, rank_gpus
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand


class RandomPolicy:
    name: ClassVar[str] = "random"

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def reseed(self, seed: int) -> None:
        """Replays reseed per run so that GPU draws are reproducible."""
        self._rng = random.Random(seed)

    def score_nodes(
        self, xp: ArrayNamespace, state: ClusterState, d: PodDemand, feasible: Array, fit: Array
    ) -> Array:
        return xp.zeros(feasible.shape, dtype=xp.float64)

    def pick_gpus(
        self, xp: ArrayNamespace, state: ClusterState, row: int, d: PodDemand, fit: Array
    ) -> list[int]:
        if d.num_gpus == 1 and not d.whole:
            slots = [int(s) for s in xp.nonzero(fit[row, :])[0]]
            return [slots[self._rng.randrange(len(slots))]]
        return rank_gpus(xp, state.free_milli[row, :], fit[row, :], d.num_gpus, ascending=True)

    def observe(self, state: ClusterState) -> None:
        return None
