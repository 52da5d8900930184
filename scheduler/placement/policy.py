"""The placement-policy contract: what every policy implements and what it declares it can do.

`score_nodes` ranks all nodes at once (array program, higher is better, only `feasible` rows matter);
`pick_gpus` chooses the GPU slots inside the chosen node. Both read the cluster through `NodeArrays`
and take their array namespace from it. The cycle, the trace replay and the benchmarks call policies only
through this interface, and ask `capabilities` what else a policy can do: nothing is discovered by name
or with `getattr`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from scheduler.placement.workload import DEFAULT_COVERAGE, TypicalWorkload
from scheduler.state.backend import ArrayNamespace
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays

Array = Any


@dataclass(frozen=True)
class Capabilities:
    """What a policy declares beyond scoring.

    row_local: a node's score and the GPUs chosen inside it depend on that node's row and the demand
        alone, and never change for the same row and demand; the incremental placer then keeps scores
        per demand and re-scores only rows that changed (`ClusterState.row_version`).
    typical_workload: scores against a typical workload; give it one with `set_typical_workload`
        (trace replay and benchmarks take it from their pod list), else it learns one from the pods.
    workload_coverage: the share of the pod list that workload should cover (most popular types first).
    seeded: draws random numbers; `reseed` makes a run reproducible.
    fills_gpus: a fraction goes to a GPU already in use rather than to an unused one where it can (the GPU
        level packs); under the device plugin's hand-off a fraction then waits for a GPU in use on a node
        whose pod the plugin has yet to allocate rather than start one (`Session.fill_first`).
    """

    row_local: bool = False
    typical_workload: bool = False
    workload_coverage: float = DEFAULT_COVERAGE
    seeded: bool = False
    fills_gpus: bool = True


class PlacementPolicy(Protocol):
    name: ClassVar[str]

    @property
    def capabilities(self) -> Capabilities: ...

    def score_nodes(self, state: NodeArrays, d: PodDemand, feasible: Array, fit: Array) -> Array:
        """float[N] scores; rows outside `feasible` are ignored by the caller."""
        ...

    def pick_gpus(self, state: NodeArrays, row: int, d: PodDemand, fit: Array) -> list[int]:
        """`d.num_gpus` distinct GPU slots of node `row` among those where `fit[row]` is true."""
        ...

    def set_typical_workload(self, workload: TypicalWorkload) -> None:
        """Score against `workload` from now on (meaningful with `capabilities.typical_workload`)."""
        ...

    def reseed(self, seed: int) -> None:
        """Restart the policy's random draws from `seed` (meaningful with `capabilities.seeded`)."""
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


# Read the state's change log when at most this many changes happened since (else one pass over the rows).
CHANGE_LOG_READ_MAX = 512


def changed_since(state: NodeArrays, since: int) -> Array:
    """int64 indices of the rows changed after version `since`, ascending: what `row_version > since`
    selects, from the state's change log where it has one and few changes happened (a cache refreshed
    once per decision then costs no pass over every row)."""
    xp = state.xp
    if state.version - since <= CHANGE_LOG_READ_MAX:
        rows = state.changed_rows(since)
        if rows is not None:
            return xp.asarray(rows, dtype=xp.int64)
    return xp.nonzero(state.row_version > since)[0]


def scatter_rows(xp: ArrayNamespace, dst: Array, rows: Array | list[int], src: Array) -> None:
    """dst[rows] = src, `rows` an int64 index array or a list of row numbers. The array API has no
    integer-array assignment: numpy and CuPy do it in one op, array-api-strict row by row (and so does a
    single listed row, which needs no index array)."""
    if isinstance(rows, list):
        if len(rows) == 1:
            dst[rows[0], ...] = src[0, ...]
            return
        rows = xp.asarray(rows, dtype=xp.int64)
    if getattr(xp, "__name__", "") != "array_api_strict":
        dst[rows, ...] = src
        return
    for i in range(int(rows.shape[0])):
        dst[int(rows[i]), ...] = src[i, ...]
