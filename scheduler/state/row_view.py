"""Some rows of a `ClusterState`, read only, for kernels that look at each node on its own.

Filters and row-local scores (binpack, spread) give a row here the same answer as on the whole state, so
the incremental placer re-scores just the rows a placement changed. Contiguous rows (often a single one)
are slices, no copy; others are gathered, each array when a kernel first reads it (most read only some).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scheduler.state.backend import ArrayNamespace
from scheduler.state.codebook import Codebook, LabelBook, TaintBook
from scheduler.state.node_arrays import Array

if TYPE_CHECKING:
    from scheduler.state.cluster_state import ClusterState


class _Rows:
    """The parent's array of the same name restricted to the view's rows, taken once on first read
    (a non-data descriptor: the value then sits in the instance and is found first)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, view: RowView | None, owner: type | None = None) -> Array:
        if view is None:
            return self
        value = view.take(self.name)
        view.__dict__[self.name] = value
        return value


class RowView:
    free_milli = _Rows()
    free_mib = _Rows()
    report_free_mib = _Rows()
    total_mib = _Rows()
    present = _Rows()
    healthy = _Rows()
    free_cpu = _Rows()
    free_mem = _Rows()
    total_cpu = _Rows()
    total_mem = _Rows()
    free_pods = _Rows()
    total_pods = _Rows()
    free_scalar = _Rows()
    total_scalar = _Rows()
    model = _Rows()
    valid = _Rows()
    cordoned = _Rows()
    port_use = _Rows()
    label_matrix = _Rows()
    taint_matrix = _Rows()
    row_version = _Rows()
    domain = _Rows()
    row_id = _Rows()

    def __init__(self, state: ClusterState, rows: list[int]) -> None:
        self._state = state
        self.rows = rows
        self.xp: ArrayNamespace = state.xp
        self.max_gpus: int = state.max_gpus
        self.capacity: int = len(rows)
        self.version: int = state.version
        self.models: Codebook = state.models
        self.labels: LabelBook = state.labels
        self.taints: TaintBook = state.taints
        self.scalars: Codebook = state.scalars
        self.ports: Codebook = state.ports
        first = rows[0] if rows else 0
        contiguous = rows == list(range(first, first + len(rows)))
        self._slice = slice(first, first + len(rows)) if contiguous else None
        self._idx: Any = None

    def row_of(self, name: str) -> int | None:
        return self._state.row_of(name)

    def changed_rows(self, since: int) -> list[int] | None:
        return None  # a view keeps no change log of its own rows: `row_version` tells

    def take(self, name: str) -> Array:
        whole = getattr(self._state, name)
        if self._slice is not None:
            return whole[self._slice, ...]
        if self._idx is None:
            self._idx = self.xp.asarray(self.rows, dtype=self.xp.int64)
        return self.xp.take(whole, self._idx, axis=0)
