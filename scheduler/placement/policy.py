"""The placement-policy contract: every policy is a pair of kernels with the same signature.

`score_nodes` ranks all nodes at once (array program, higher is better, only `feasible` rows matter);
`pick_gpus` chooses the GPU slots inside the chosen node. The cycle, the trace replay and the benchmarks
all call policies only through this interface.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from scheduler.backend import ArrayNamespace
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand

Array = Any


class PlacementPolicy(Protocol):
    name: ClassVar[str]

    def score_nodes(
        self, xp: ArrayNamespace, state: ClusterState, d: PodDemand, feasible: Array, fit: Array
    ) -> Array:
        """float[N] scores; rows outside `feasible` are ignored by the caller."""
        ...

    def pick_gpus(
        self, xp: ArrayNamespace, state: ClusterState, row: int, d: PodDemand, fit: Array
    ) -> list[int]:
        """`d.num_gpus` distinct GPU slots of node `row` among those where `fit[row]` is true."""
        ...

    def observe(self, state: ClusterState) -> None:
        """Hook called after a placement is applied (policies with caches refresh touched rows)."""
        ...


def rank_gpus(
    xp: ArrayNamespace, key_row: Array, fit_row: Array, count: int, *, ascending: bool
) -> list[int]:
    """The `count` fitting slots with the smallest (or largest) key; ties go to the lower slot index."""
    g = key_row.shape[0]
    big = 1 << 40
    key = xp.astype(key_row, xp.int64) * (1 if ascending else -1)
    key = xp.where(fit_row, key, xp.full(key.shape, big, dtype=xp.int64))
    order = xp.argsort(key, stable=True)
    return [int(order[i]) for i in range(min(count, g))]


def scatter_rows(xp: ArrayNamespace, dst: Array, rows: Array, src: Array) -> None:
    """dst[rows] = src for an int64 index array `rows`. The array API has no integer-array assignment:
    numpy and CuPy do it in one op, array-api-strict row by row."""
    if getattr(xp, "__name__", "") != "array_api_strict":
        dst[rows, ...] = src
        return
    for i in range(int(rows.shape[0])):
        dst[int(rows[i]), ...] = src[i, ...]
