"""What the placement kernels read of the cluster: the row arrays and the codebooks behind their codes.

`ClusterState` is the whole cluster; `RowView` is some of its rows (the incremental placer re-scores only
the rows a placement changed). Kernels are written against this protocol, read only, and take their
array namespace from it (`state.xp`), so one kernel runs on numpy, CuPy and array-api-strict unchanged.
"""

from __future__ import annotations

from typing import Any, Protocol

from scheduler.state.backend import ArrayNamespace
from scheduler.state.codebook import Codebook, LabelBook, TaintBook

Array = Any

# Per-row arrays (first axis: node rows), in the order `ClusterState` allocates them.
ROW_ARRAYS = (
    "free_milli", "free_mib", "report_free_mib", "total_mib", "present", "healthy", "free_cpu",
    "free_mem", "total_cpu", "total_mem", "free_pods", "total_pods", "free_scalar", "total_scalar",
    "model", "valid", "cordoned", "label_matrix", "taint_matrix", "port_use", "row_version", "domain", "row_id",
)  # fmt: skip


class NodeArrays(Protocol):
    """Rows are nodes, columns GPU slots; every array has `capacity` rows (masked by `valid`)."""

    @property
    def xp(self) -> ArrayNamespace: ...
    @property
    def max_gpus(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def version(self) -> int:
        """Bumped on every change of any row (see `row_version`)."""
        ...

    @property
    def models(self) -> Codebook: ...
    @property
    def labels(self) -> LabelBook: ...
    @property
    def taints(self) -> TaintBook: ...
    @property
    def ports(self) -> Codebook:
        """Host ports in use ("protocol/port/hostIP"): the columns of port_use."""
        ...

    @property
    def scalars(self) -> Codebook:
        """Resource names other than cpu, memory and GPUs: the columns of free_scalar / total_scalar."""
        ...

    # per GPU: int[R, G] / bool[R, G]
    @property
    def free_milli(self) -> Array: ...
    @property
    def free_mib(self) -> Array: ...
    @property
    def report_free_mib(self) -> Array: ...
    @property
    def total_mib(self) -> Array: ...
    @property
    def present(self) -> Array: ...
    @property
    def healthy(self) -> Array: ...

    # per node: int[R] / bool[R] / bool[R, labels or taints]
    @property
    def free_cpu(self) -> Array: ...
    @property
    def free_mem(self) -> Array: ...
    @property
    def total_cpu(self) -> Array: ...
    @property
    def total_mem(self) -> Array: ...
    @property
    def free_pods(self) -> Array:
        """int64[R]: pod slots left (allocatable `pods` less the pods there)."""
        ...

    @property
    def total_pods(self) -> Array: ...
    @property
    def free_scalar(self) -> Array:
        """int64[R, K]: what is left of each other resource (a column per name in `scalars`)."""
        ...

    @property
    def total_scalar(self) -> Array: ...
    @property
    def model(self) -> Array: ...
    @property
    def valid(self) -> Array: ...
    @property
    def cordoned(self) -> Array:
        """bool[R]: live and usable but spec.unschedulable (only pods tolerating that go there)."""
        ...

    @property
    def port_use(self) -> Array:
        """int32[R, P]: pods on each node binding each host port."""
        ...

    @property
    def label_matrix(self) -> Array: ...
    @property
    def taint_matrix(self) -> Array: ...
    @property
    def domain(self) -> Array:
        """int32[R, levels]: each node's topology domain code per level (-1: outside that topology)."""
        ...

    @property
    def row_id(self) -> Array:
        """int64[R]: the row's index in the whole state (a view's rows say which they are)."""
        ...

    @property
    def row_version(self) -> Array:
        """int64[R]: the `version` at which each row last changed."""
        ...

    def row_of(self, name: str) -> int | None:
        """The row of node `name` in the whole state (compare with `row_id`); None: no such node."""
        ...

    def changed_rows(self, since: int) -> list[int] | None:
        """The rows changed after version `since`, ascending, from a change log; None where there is none
        (or it no longer reaches back that far): then `row_version > since` tells."""
        ...
