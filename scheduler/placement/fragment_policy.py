"""`FragmentPolicy`: the machinery the fragment-driven policies (`fgd`, `fragfit`, `wastefit`) share.

The typical workload, the node views the fragment kernels (`fragment.py`) read, and a per-shape score
cache. Subclasses define `transform` (dF -> score) and may refine `trained_scores`.

Workload: the replay and the benchmark hand over the trace's; the live scheduler hands over what it learns
from the pods it knows (`live_workload.py`), once it has seen enough of them. Until a policy has one it
places as `binpack` does: fragmentation measured against a guess is worse than none (a workload learned
from a restarted scheduler's first few pods spread fractions over a small cluster's GPUs and stranded a
whole-GPU pod).

Caching: scores depend only on a node's own state, so they are kept per pod shape (CPU, milli, devices,
models) and refreshed only on rows whose `row_version` moved since the shape was last scored. A full
refresh collapses identical nodes first when they are few (at start-up a cluster is a few node kinds)
and scores one row per distinct state. For a fraction the entry also keeps each row's best GPU (the
argmax the node's score came from), so choosing the GPU inside the chosen node costs no second run of
the kernels; otherwise (a row whose cached GPU the caller's fit rules out) it is re-derived for that row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from scheduler.placement.base_policy import BasePolicy
from scheduler.placement.bestfit import BestFitPolicy
from scheduler.placement.filters import gpu_need
from scheduler.placement.fragment import (
    best_fit_selection,
    fragment_after_fraction,
    fragment_after_selection,
)
from scheduler.placement.fragment_classes import (
    SizeState,
    SizeTables,
    admits,
    fraction_after,
    fragment_of,
    one_device_after,
    size_state,
)
from scheduler.placement.level_policy import BinpackPolicy
from scheduler.placement.policy import Array, Capabilities, changed_since, scatter_rows
from scheduler.placement.tiebreak import with_tiebreak
from scheduler.placement.workload import DEFAULT_COVERAGE, TypicalWorkload, WorkloadArrays
from scheduler.state.backend import ArrayNamespace
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays

# Refresh rows one by one below this many stale rows; above, rescore everything (deduplicated).
PARTIAL_REFRESH_MAX = 48
# ... or up to this share of all rows: the kernel on a few hundred gathered rows still beats a full pass
# (a shape asked rarely sees every row touched since its last use; see docs/performance.md).
PARTIAL_REFRESH_SHARE = 8
# Above this many stale rows, a GPU pod's kernel runs only on those with room for it (the others score
# -inf anyway): a shape asked rarely finds dozens of rows changed, most of them full by then (on the
# benchmark about 1 in 6 still fits), and the fraction kernels' cost grows with rows x GPUs x types.
FIT_FIRST_MIN_ROWS = 12


# Collapse identical nodes only when they are at most this share of the rows (else scoring every row is
# cheaper than the bookkeeping).
COLLAPSE_MAX_SHARE = 0.5
_HASH_MOD = 1 << 40


@dataclass
class _Entry:
    version: int
    score: Array  # float64[N]
    gpu: Array | None = None  # int64[N] the best GPU of each row, for a fraction (the score's argmax)


@dataclass
class NodeView:
    """What the fragment kernels read, for a set of rows."""

    free: Array  # int64[R, G], 0 on absent or unhealthy GPUs
    cpu: Array  # int64[R]
    access: Array  # bool[R, M]
    need: Array  # int64[R] milli one device of the pod takes there
    mem: Array  # int64[R] free host memory (MiB)
    model: Array  # int64[R] GPU model code + 1 (0: no GPU)
    _total: Array | None = field(default=None, repr=False)

    def total(self, xp: ArrayNamespace) -> Array:
        """int64[R] free GPU milli of each row (summed once: several terms read it)."""
        if self._total is None:
            self._total = xp.sum(self.free, axis=1)
        return self._total


def is_fraction(d: PodDemand) -> bool:
    return d.num_gpus == 1 and not d.whole


def _table_before(
    xp: ArrayNamespace, wa: WorkloadArrays, t: SizeTables, v: NodeView, d: PodDemand
) -> tuple[SizeState, Array, Array]:
    """The rows' table state, their F before, and which types each row admits once the pod's CPU is gone."""
    s = size_state(xp, t, v.free, v.total(xp))
    before = fragment_of(xp, t, s, admits(xp, v.access, v.cpu, wa.cpu), wa.weight, wa.weight_sum)
    return s, before, admits(xp, v.access, v.cpu - d.cpu_milli, wa.cpu)


@dataclass
class FragmentPolicy(BasePolicy):
    """Shared machinery of the fragment-driven policies: workload, node views, per-shape score cache.
    Subclasses define `transform` (dF -> score)."""

    workload: TypicalWorkload | None = None
    tie_break: bool = True  # order equal scores by best fit
    coverage: float = DEFAULT_COVERAGE
    name: ClassVar[str] = "fragment"
    _arrays: WorkloadArrays | None = field(default=None, init=False, repr=False)
    _cache: dict[tuple[Any, ...], _Entry] = field(default_factory=dict, init=False, repr=False)
    _capacity: int = field(default=-1, init=False, repr=False)
    _bestfit: BestFitPolicy = field(default_factory=BestFitPolicy, init=False, repr=False)
    _untrained: BinpackPolicy = field(default_factory=BinpackPolicy, init=False, repr=False)

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        return Capabilities(typical_workload=True, workload_coverage=self.coverage)

    # ------------------------------------------------------------------------------------ workload
    def set_typical_workload(self, workload: TypicalWorkload) -> None:
        self.workload = workload
        self._arrays = None
        self._cache.clear()

    @property
    def trained(self) -> bool:
        """It has a workload to measure fragmentation against (else it places as `binpack`)."""
        return self.workload is not None and bool(self.workload.types)

    def _workload_arrays(self, state: NodeArrays) -> WorkloadArrays:
        if self._arrays is None or self._arrays.models_seen != len(state.models):
            assert self.workload is not None
            self._arrays = WorkloadArrays.build(state.xp, self.workload, state.models)
            self._cache.clear()
        return self._arrays

    # ---------------------------------------------------------------------------------- node views
    def view(self, state: NodeArrays, wa: WorkloadArrays, d: PodDemand, idx: Array | None = None) -> NodeView:
        """The kernels' inputs for all rows, or only rows `idx` (gathered first, so a partial refresh
        touches only those rows)."""
        xp = state.xp

        def pick(a: Array) -> Array:
            return a if idx is None else xp.take(a, idx, axis=0)

        usable = pick(state.present) & pick(state.healthy)
        zero = xp.zeros(usable.shape, dtype=xp.int64)
        free = xp.where(usable, xp.astype(pick(state.free_milli), xp.int64), zero)
        cpu = pick(state.free_cpu)
        model = xp.astype(pick(state.model) + 1, xp.int64)
        access = xp.take(wa.access, model, axis=0)
        if not d.uses_gpu:
            need = xp.zeros_like(cpu)
        elif not d.gpu_mib:  # milli only: the same need on every node
            need = xp.full(cpu.shape, d.gpu_milli, dtype=xp.int64)
        else:  # a share of memory: the milli it takes on the row's GPUs (absent slots have no memory)
            milli = xp.where(state.present, gpu_need(state, d)[0], xp.zeros((), dtype=xp.int64))
            need = xp.max(pick(milli), axis=1)
        return NodeView(free, cpu, access, need, pick(state.free_mem), model)

    @staticmethod
    def rows(xp: ArrayNamespace, v: NodeView, idx: Array) -> NodeView:
        return NodeView(
            xp.take(v.free, idx, axis=0),
            xp.take(v.cpu, idx, axis=0),
            xp.take(v.access, idx, axis=0),
            xp.take(v.need, idx, axis=0),
            xp.take(v.mem, idx, axis=0),
            xp.take(v.model, idx, axis=0),
        )

    # ------------------------------------------------------------------------------------- scoring
    def transform(
        self, xp: ArrayNamespace, before: Array, after: Array, view: NodeView, d: PodDemand
    ) -> Array:
        """Score (higher better) from fragment before [R] (broadcast) and after [R] or [R, G]."""
        raise NotImplementedError

    def row_term(self, xp: ArrayNamespace, v: NodeView, d: PodDemand) -> Array | None:
        """float64[R] added to each row's score after the GPU inside it is chosen (None: nothing). Only
        what a row's own state decides may go here: the score cache refreshes rows one by one."""
        return None

    def kernel(self, xp: ArrayNamespace, wa: WorkloadArrays, v: NodeView, d: PodDemand) -> Array:
        """float64[R] scores for the rows of `v`; -inf where the pod does not fit."""
        return self._kernel(xp, wa, v, d)[0]

    def _kernel(
        self, xp: ArrayNamespace, wa: WorkloadArrays, v: NodeView, d: PodDemand
    ) -> tuple[Array, Array | None]:
        """`kernel`, and for a fraction int64[R]: the GPU of each row the score comes from (first best)."""
        score, gpu = self._fragment_kernel(xp, wa, v, d)
        extra = self.row_term(xp, v, d)
        return (score if extra is None else score + extra), gpu

    def _fragment_kernel(
        self, xp: ArrayNamespace, wa: WorkloadArrays, v: NodeView, d: PodDemand
    ) -> tuple[Array, Array | None]:
        neg = -float("inf")
        if is_fraction(d):
            before, after = self._fraction_fragments(xp, wa, v, d)
            per_gpu = self.transform(xp, before[:, None], after, v, d)
            fit = v.free >= v.need[:, None]
            per_gpu = xp.where(fit, per_gpu, xp.full(per_gpu.shape, neg, dtype=xp.float64))
            return xp.max(per_gpu, axis=1), xp.argmax(per_gpu, axis=1)
        if wa.tables is not None and d.num_gpus <= 1:
            return self._class_kernel(xp, wa, wa.tables, v, d), None
        if d.uses_gpu:
            fit = v.free >= v.need[:, None]
            sel = best_fit_selection(xp, v.free, fit, d.num_gpus)
            take = xp.where(sel, v.need[:, None] * xp.ones_like(v.free), xp.zeros_like(v.free))
            ok = xp.sum(xp.astype(sel, xp.int64), axis=1) >= d.num_gpus
        else:
            take = xp.zeros_like(v.free)
            ok = xp.ones(v.cpu.shape, dtype=xp.bool)
        before, after = fragment_after_selection(xp, wa, v.free, v.cpu, v.access, take, d.cpu_milli)
        score = self.transform(xp, before, after, v, d)
        return xp.where(ok, score, xp.full(score.shape, neg, dtype=xp.float64)), None

    @staticmethod
    def _fraction_fragments(
        xp: ArrayNamespace, wa: WorkloadArrays, v: NodeView, d: PodDemand
    ) -> tuple[Array, Array]:
        """(F before [R], F after the fraction goes on GPU g [R, G]), from the tables where they apply."""
        t = wa.tables
        if t is None:
            return fragment_after_fraction(xp, wa, v.free, v.cpu, v.access, v.need, d.cpu_milli)
        s, before, ok_after = _table_before(xp, wa, t, v, d)
        return before, fraction_after(xp, t, s, v.free, v.need, ok_after, wa.weight, wa.weight_sum)

    def _class_kernel(
        self, xp: ArrayNamespace, wa: WorkloadArrays, t: SizeTables, v: NodeView, d: PodDemand
    ) -> Array:
        """`_kernel` for a whole GPU or no GPU (fractions: `_fraction_fragments`), the GPU terms read from
        tables (`fragment_classes.py`): the same scores in fewer array operations."""
        s, before, ok_after = _table_before(xp, wa, t, v, d)
        if not d.uses_gpu:
            return self.transform(xp, before, fragment_of(xp, t, s, ok_after, wa.weight, wa.weight_sum), v, d)
        after, ok = one_device_after(xp, t, s, v.free, v.need, ok_after, wa.weight, wa.weight_sum)
        score = self.transform(xp, before, after, v, d)
        return xp.where(ok, score, xp.full(score.shape, -float("inf"), dtype=xp.float64))

    def _full(
        self, xp: ArrayNamespace, wa: WorkloadArrays, v: NodeView, d: PodDemand
    ) -> tuple[Array, Array | None]:
        """Score every row, once per distinct node state when few are distinct (a node's score depends
        on its free milli as a multiset, its free CPU and memory, model and the pod's need there)."""
        n = int(v.cpu.shape[0])
        if n < 8:
            return self._kernel(xp, wa, v, d)
        free_sorted = xp.sort(v.free, axis=1)
        key = xp.zeros(v.cpu.shape, dtype=xp.int64)
        columns = [free_sorted[:, g] for g in range(int(free_sorted.shape[1]))]
        columns += [
            v.cpu % 1_000_003,
            v.mem % 1_000_003,
            v.need,
            xp.astype(xp.argmax(xp.astype(v.access, xp.int64), axis=1), xp.int64),
        ]
        for col in columns:  # polynomial hash, kept below 2^63 by the modulus
            key = (key * 1_000_033 + col) % _HASH_MOD
        uniq = xp.unique_inverse(key)
        u = int(uniq.values.shape[0])
        if u > COLLAPSE_MAX_SHARE * n:
            return self._kernel(xp, wa, v, d)
        inverse = xp.reshape(uniq.inverse_indices, (-1,))
        order = xp.argsort(inverse, stable=True)
        sorted_inv = xp.take(inverse, order)
        first = xp.concat([xp.ones((1,), dtype=xp.bool), sorted_inv[1:] != sorted_inv[:-1]])
        reps = xp.take(order, xp.nonzero(first)[0])
        rep_view = self.rows(xp, v, reps)
        # Exactness: a hash collision would merge different nodes; check and fall back if so.
        same = (
            xp.all(xp.take(xp.sort(rep_view.free, axis=1), inverse, axis=0) == free_sorted)
            and xp.all(xp.take(rep_view.cpu, inverse) == v.cpu)
            and xp.all(xp.take(rep_view.need, inverse) == v.need)
            and xp.all(xp.take(rep_view.mem, inverse) == v.mem)
            and xp.all(xp.take(rep_view.access, inverse, axis=0) == v.access)
        )
        if not bool(same):
            return self._kernel(xp, wa, v, d)
        # A representative's best GPU is its own slot; a row with the same multiset of free milli may have
        # its GPUs in another order: its GPU is derived again when chosen (`pick_gpus`), not taken from here.
        return xp.take(self._kernel(xp, wa, rep_view, d)[0], inverse), None

    def _kernel_with_room(
        self, xp: ArrayNamespace, wa: WorkloadArrays, v: NodeView, d: PodDemand
    ) -> tuple[Array, Array | None]:
        """`_kernel` for the rows of `v`, run only on rows with enough GPUs where one device fits (the
        kernels' own -inf test) once the rows are many; the same scores and GPUs."""
        n = int(v.cpu.shape[0])
        if n < FIT_FIRST_MIN_ROWS or not d.uses_gpu:
            return self._kernel(xp, wa, v, d)
        room = xp.sum(xp.astype(v.free >= v.need[:, None], xp.int64), axis=1) >= d.num_gpus
        idx = xp.nonzero(room)[0]
        score = xp.full((n,), -float("inf"), dtype=xp.float64)
        fraction = is_fraction(d)
        gpu = xp.full((n,), -1, dtype=xp.int64) if fraction else None
        if int(idx.shape[0]):
            some, some_gpu = self._kernel(xp, wa, self.rows(xp, v, idx), d)
            scatter_rows(xp, score, idx, some)
            if gpu is not None and some_gpu is not None:
                scatter_rows(xp, gpu, idx, some_gpu)
        return score, gpu

    def _key(self, d: PodDemand) -> tuple[Any, ...]:
        return (d.cpu_milli, d.num_gpus, d.gpu_milli, d.gpu_mib, d.models)

    def score_nodes(self, state: NodeArrays, d: PodDemand, feasible: Array, fit: Array) -> Array:
        if not self.trained:
            return self._untrained.score_nodes(state, d, feasible, fit)
        return self.trained_scores(state, d, feasible, fit)

    def trained_scores(self, state: NodeArrays, d: PodDemand, feasible: Array, fit: Array) -> Array:
        """`score_nodes` once the policy has a workload."""
        primary = self.primary_scores(state, d)
        return with_tiebreak(self._bestfit, state, d, feasible, fit, primary) if self.tie_break else primary

    def primary_scores(self, state: NodeArrays, d: PodDemand) -> Array:
        """float64[N] policy scores for every row, from the per-shape cache (-inf: does not fit). Only
        with a workload (`trained`)."""
        xp = state.xp
        if state.capacity != self._capacity:
            self._capacity = state.capacity
            self._cache.clear()
        wa = self._workload_arrays(state)
        key = self._key(d)
        entry = self._cache.get(key)
        if entry is not None and entry.version == state.version:
            return entry.score
        if entry is not None:
            stale = changed_since(state, entry.version)
            if int(stale.shape[0]) <= max(PARTIAL_REFRESH_MAX, state.capacity // PARTIAL_REFRESH_SHARE):
                score, gpu = self._kernel_with_room(xp, wa, self.view(state, wa, d, stale), d)
                scatter_rows(xp, entry.score, stale, score)
                if entry.gpu is not None and gpu is not None:
                    scatter_rows(xp, entry.gpu, stale, gpu)
                entry.version = state.version
                return entry.score
        score, gpu = self._full(xp, wa, self.view(state, wa, d), d)
        if gpu is None and is_fraction(d):
            gpu = xp.full(score.shape, -1, dtype=xp.int64)  # not known: derived when chosen
        self._cache[key] = _Entry(state.version, score, gpu)
        return score

    def pick_gpus(self, state: NodeArrays, row: int, d: PodDemand, fit: Array) -> list[int]:
        xp = state.xp
        if not self.trained:
            return self._untrained.pick_gpus(state, row, d, fit)
        if is_fraction(d):
            entry = self._cache.get(self._key(d))
            if entry is not None and entry.gpu is not None and entry.version == state.version:
                # The kernel's per-GPU fit (free >= need) holds wherever the caller's does: its first best
                # GPU, if the caller's fit allows it, is the first best among the caller's GPUs too.
                g = int(entry.gpu[row])
                if g >= 0 and bool(fit[row, g]):
                    return [g]
            wa = self._workload_arrays(state)
            v = self.view(state, wa, d, xp.asarray([row], dtype=xp.int64))
            before, after = self._fraction_fragments(xp, wa, v, d)
            per_gpu = self.transform(xp, before[:, None], after, v, d)[0, :]
            per_gpu = xp.where(fit[row, :], per_gpu, xp.full(per_gpu.shape, -float("inf"), dtype=xp.float64))
            return [int(xp.argmax(per_gpu))]
        return super().pick_gpus(state, row, d, fit)
