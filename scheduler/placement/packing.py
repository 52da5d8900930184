"""`binpack` and `spread`, at node and GPU level (KAI Scheduler's placement strategies).

binpack fills the most-used nodes and, inside a node, the most-used GPU that still fits (best fit), keeping
whole GPUs and whole nodes free for big requests. spread does the opposite, for latency-sensitive work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.backend import ArrayNamespace
from scheduler.placement.policy import Array, rank_gpus
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand

Level = Literal["binpack", "spread"]


def node_used_fraction(xp: ArrayNamespace, state: ClusterState, d: PodDemand) -> Array:
    """Share of the node's GPU compute (or CPU, for CPU-only pods) already allocated, in [0, 1]."""
    if d.uses_gpu:
        present = xp.astype(state.present, xp.int64)
        total = xp.sum(present, axis=1) * MILLI_PER_GPU
        free = xp.sum(xp.astype(state.free_milli, xp.int64) * present, axis=1)
    else:
        total, free = state.total_cpu, state.free_cpu
    safe = xp.where(total > 0, total, xp.ones_like(total))
    return xp.astype(total - free, xp.float64) / xp.astype(safe, xp.float64)


@dataclass
class PackingPolicy:
    """Node and GPU levels chosen independently (binpack/spread each)."""

    node_level: Level = "binpack"
    gpu_level: Level = "binpack"
    name: ClassVar[str] = "packing"

    def score_nodes(
        self, xp: ArrayNamespace, state: ClusterState, d: PodDemand, feasible: Array, fit: Array
    ) -> Array:
        used = node_used_fraction(xp, state, d)
        return used if self.node_level == "binpack" else -used

    def pick_gpus(
        self, xp: ArrayNamespace, state: ClusterState, row: int, d: PodDemand, fit: Array
    ) -> list[int]:
        return rank_gpus(
            xp, state.free_milli[row, :], fit[row, :], d.num_gpus, ascending=self.gpu_level == "binpack"
        )

    def observe(self, state: ClusterState) -> None:
        return None


class BinpackPolicy(PackingPolicy):
    name: ClassVar[str] = "binpack"

    def __init__(self) -> None:
        super().__init__("binpack", "binpack")


class SpreadPolicy(PackingPolicy):
    name: ClassVar[str] = "spread"

    def __init__(self) -> None:
        super().__init__("spread", "spread")
