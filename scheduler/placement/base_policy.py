"""`BasePolicy`: what most policies share: no optional capability, best fit for the GPUs inside a node."""

from __future__ import annotations

from typing import ClassVar

from scheduler.placement.policy import Array, Capabilities, rank_gpus
from scheduler.placement.workload import TypicalWorkload
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays


class BasePolicy:
    name: ClassVar[str] = "base"
    # A class attribute, or a property where it depends on the policy's options.
    capabilities: ClassVar[Capabilities] = Capabilities()

    def pick_gpus(self, state: NodeArrays, row: int, d: PodDemand, fit: Array) -> list[int]:
        """Best fit: the fitting GPUs with the least free milli (ties to the lower slot)."""
        return rank_gpus(state.xp, state.free_milli[row, :], fit[row, :], d.num_gpus, ascending=True)

    def set_typical_workload(self, workload: TypicalWorkload) -> None:
        return None  # scores without one

    def reseed(self, seed: int) -> None:
        return None  # draws nothing at random
