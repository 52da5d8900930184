"""`LevelPolicy`: binpack or spread, at node level and at GPU level (KAI Scheduler's placement strategies).

binpack fills the most-used nodes and, inside a node, the most-used GPU that still fits (best fit), keeping
whole GPUs and whole nodes free for big requests. spread does the opposite, for latency-sensitive work.
Both are row-local: a node's score is its own used share, so the placer re-scores only changed rows.
(The FGD paper's GpuPacking, registered as `packing`, is another policy: `gpu_packing.py`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.placement.base_policy import BasePolicy
from scheduler.placement.policy import Array, Capabilities, rank_gpus
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays

Level = Literal["binpack", "spread"]


def node_used_fraction(state: NodeArrays, d: PodDemand) -> Array:
    """Share of the node's GPU compute (or CPU, for CPU-only pods) already allocated, in [0, 1]."""
    xp = state.xp
    if d.uses_gpu:
        present = xp.astype(state.present, xp.int64)
        total = xp.sum(present, axis=1) * MILLI_PER_GPU
        free = xp.sum(xp.astype(state.free_milli, xp.int64) * present, axis=1)
    else:
        total, free = state.total_cpu, state.free_cpu
    safe = xp.maximum(total, xp.ones_like(total))  # a node without GPUs (or CPU) counts as unused
    return xp.astype(total - free, xp.float64) / xp.astype(safe, xp.float64)


@dataclass(frozen=True)
class LevelPolicy(BasePolicy):
    """Node and GPU levels chosen independently (binpack/spread each)."""

    node_level: Level = "binpack"
    gpu_level: Level = "binpack"
    name: ClassVar[str] = "level"
    capabilities: ClassVar[Capabilities] = Capabilities(row_local=True)

    def score_nodes(self, state: NodeArrays, d: PodDemand, feasible: Array, fit: Array) -> Array:
        used = node_used_fraction(state, d)
        return used if self.node_level == "binpack" else -used

    def pick_gpus(self, state: NodeArrays, row: int, d: PodDemand, fit: Array) -> list[int]:
        ascending = self.gpu_level == "binpack"
        return rank_gpus(state.xp, state.free_milli[row, :], fit[row, :], d.num_gpus, ascending=ascending)


@dataclass(frozen=True)
class BinpackPolicy(LevelPolicy):
    name: ClassVar[str] = "binpack"


@dataclass(frozen=True)
class SpreadPolicy(LevelPolicy):
    node_level: Level = "spread"
    gpu_level: Level = "spread"
    name: ClassVar[str] = "spread"
    capabilities: ClassVar[Capabilities] = Capabilities(row_local=True, fills_gpus=False)
