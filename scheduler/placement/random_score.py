"""`random`: any feasible node, uniformly (the caller's random tie-break does the drawing), and for a
fraction any GPU with room, uniformly (the FGD paper's Random baseline); whole GPUs: the first free ones.
"""

from __future__ import annotations

import random
from typing import ClassVar

from scheduler.placement.base_policy import BasePolicy
from scheduler.placement.policy import Array, Capabilities
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays


class RandomPolicy(BasePolicy):
    name: ClassVar[str] = "random"
    capabilities: ClassVar[Capabilities] = Capabilities(seeded=True, fills_gpus=False)

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def reseed(self, seed: int) -> None:
        """Replays reseed per run so that GPU draws are reproducible."""
        self._rng = random.Random(seed)

    def score_nodes(self, state: NodeArrays, d: PodDemand, feasible: Array, fit: Array) -> Array:
        return state.xp.zeros(feasible.shape, dtype=state.xp.float64)

    def pick_gpus(self, state: NodeArrays, row: int, d: PodDemand, fit: Array) -> list[int]:
        if d.num_gpus == 1 and not d.whole:
            slots = [int(s) for s in state.xp.nonzero(fit[row, :])[0]]
            return [slots[self._rng.randrange(len(slots))]]
        return super().pick_gpus(state, row, d, fit)
