"""A certified lower bound on the unallocated GPU % any placement can reach (`tessera replay --bound`).

Whatever the policy, the replay's figure at 100% arrived is the mean, over the records of bin 100, of
the GPU milli placed so far. Placed milli never decreases, so that mean is at most what is placed at the
bin's last record, which is at most the most GPU milli that any placement of the pods arrived by then
(`arrived_at`) can hold, pods being free to stay out. An upper bound U on that maximum therefore gives
unallocated % >= 100 x (1 - U / capacity), for every policy, online or offline, with or without moves.

U is the optimum of a linear relaxation (a GPU-level cutting-stock LP):

* Nodes are grouped into types (model, GPUs, CPU, memory); a type pools its nodes' GPUs, CPU and memory.
* Pods are grouped into classes (CPU, memory, GPUs, milli per GPU, acceptable models); z[i, t] counts
  pods of class i on type t, allowed where one node of t could hold the pod alone (model accepted, CPU,
  memory, enough GPUs): sum_t z[i, t] <= n_i.
* A GPU of type t is filled by a pattern: a multiset of the fractional sizes (milli < 1000) present,
  summing to <= 1000 milli, maximal (no size fits in what is left). x[t, p] counts type-t GPUs filled
  with pattern p; a fraction of size s on type t needs a slot: sum_{i of size s} z[i, t] <= sum_p
  a[p, s] x[t, p]. A k-GPU pod takes k whole GPUs of a type with >= k GPUs per node:
  sum_p x[t, p] + sum_{i whole} k_i z[i, t] <= GPUs of t.
* CPU and memory per type: sum_i cpu_i z[i, t] <= CPU of t (memory likewise).
* Maximise the GPU milli of the pods placed, sum milli_i k_i z[i, t].

Every real placement gives a feasible point (count each node's pods by class and each GPU's fractions
as a pattern, padded to a maximal one), so the LP optimum is >= the true maximum. The LP is solved with
HiGHS; its value is not trusted as such. From the solver's row duals y (clipped to >= 0), weak duality
gives, for any feasible point with 0 <= v <= u: c.v <= b.y + sum_j u_j max(0, c_j - (A^T y)_j); that
expression is evaluated in exact rational arithmetic and is the certified U. A poor dual only makes U
larger (a weaker bound), never an unsound one.

With more than `MAX_PATTERNS` maximal patterns (many distinct small sizes), the slot rows are replaced by
milli capacity (sum of fractions <= 1000 milli per GPU), a weaker but still valid relaxation.
"""

from __future__ import annotations

import math
import os
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.replay.trace import TraceNode, TracePod

MAX_PATTERNS = 200_000


class BoundUnavailable(RuntimeError):
    """HiGHS is not installed (the `bound` extra) or did not solve the LP."""


@dataclass(frozen=True)
class Bound:
    pods: int  # pods arrived by the last record of bin 100
    arrived_milli: int
    capacity_milli: int
    lp_milli: float  # the solver's objective (not trusted)
    certified_milli: float  # certified upper bound on placeable GPU milli
    patterns: int  # 0 when the milli-capacity relaxation was used

    @property
    def unallocated_pct(self) -> float:
        """Certified lower bound on unallocated GPU % at 100% arrived."""
        placed = min(self.certified_milli, float(self.arrived_milli))
        return max(0.0, 100.0 * (1.0 - placed / self.capacity_milli))

    def to_json(self) -> dict[str, Any]:
        return {
            "pods": self.pods,
            "arrived_milli": self.arrived_milli,
            "lp_milli": round(self.lp_milli, 3),
            "certified_milli": round(self.certified_milli, 3),
            "patterns": self.patterns,
            "unallocated_pct_lower_bound": round(self.unallocated_pct, 4),
        }


def arrived_at(order: Sequence[TracePod], capacity: int, arrived_pct: int = 100) -> list[TracePod]:
    """The prefix of `order` up to the last pod whose record falls in bin `arrived_pct` (or below it:
    the whole order when it never gets past the bin)."""
    total = 0
    end = 0
    for i, pod in enumerate(order):
        total += pod.gpu_request_milli
        if math.floor(100.0 * total / capacity + 0.5) > arrived_pct:
            break
        end = i + 1
    return list(order[:end])


def maximal_patterns(sizes: Sequence[int], limit: int = MAX_PATTERNS) -> list[tuple[int, ...]] | None:
    """Multiplicities (one per size, sizes ascending) of every maximal multiset summing to <= 1000;
    None past `limit` patterns."""
    sizes = sorted(sizes)
    out: list[tuple[int, ...]] = []
    counts = [0] * len(sizes)

    def walk(i: int, left: int) -> bool:
        if i < 0:
            if not sizes or left < sizes[0]:
                out.append(tuple(counts))
            return len(out) <= limit
        for k in range(left // sizes[i], -1, -1):
            counts[i] = k
            if not walk(i - 1, left - k * sizes[i]):
                return False
        counts[i] = 0
        return True

    return out if walk(len(sizes) - 1, MILLI_PER_GPU) else None


@dataclass(frozen=True)
class _NodeType:
    model: str
    gpus: int
    cpu: int
    mem: int
    count: int


@dataclass(frozen=True)
class _PodClass:
    cpu: int
    mem: int
    gpus: int
    milli: int
    models: frozenset[str] | None

    @property
    def fraction(self) -> bool:
        return self.gpus == 1 and 0 < self.milli < MILLI_PER_GPU

    def fits(self, t: _NodeType) -> bool:
        if self.cpu > t.cpu or self.mem > t.mem or self.gpus > t.gpus:
            return False
        return not self.gpus or self.models is None or t.model in self.models


def _node_types(nodes: Sequence[TraceNode]) -> list[_NodeType]:
    kinds = Counter((n.model if n.gpu else "", n.gpu, n.cpu_milli, n.memory_mib) for n in nodes)
    return [_NodeType(m, g, c, mem, k) for (m, g, c, mem), k in sorted(kinds.items())]


def _class_of(p: TracePod) -> _PodClass:
    d = p.demand()
    return _PodClass(d.cpu_milli, d.memory_mib, d.num_gpus, d.gpu_milli if d.num_gpus else 0, d.models)


def _pod_classes(pods: Sequence[TracePod]) -> list[tuple[_PodClass, int]]:
    counts = Counter(_class_of(p) for p in pods)
    return sorted(
        counts.items(), key=lambda kv: (kv[0].gpus, kv[0].milli, kv[0].cpu, kv[0].mem, str(kv[0].models))
    )


def require_highs() -> Any:
    """The highspy module, or BoundUnavailable saying how to install it."""
    try:
        import highspy
    except ImportError:
        raise BoundUnavailable(
            "the LP bound needs HiGHS (the highspy package): pip install 'tessera[bound]', or from a "
            "checkout pip install '.[bound]'"
        ) from None
    return highspy


def _quiet_highs(highspy: Any) -> Any:
    """A Highs instance without its start-up banner, which HiGHS writes to file descriptor 1 on the
    first construction in a process (it would corrupt `--output json`)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    h.setOptionValue("output_flag", False)
    return h


class _Lp:
    """max c.v s.t. A v <= b, 0 <= v <= u, built column by column (integer data)."""

    def __init__(self) -> None:
        self.cost: list[int] = []
        self.upper: list[int] = []
        self.cols: list[dict[int, int]] = []
        self.rhs: list[int] = []
        self.tags: list[tuple[int, int] | None] = []  # (pod class, node type) of a z column
        self.primal: list[float] = []

    def row(self, rhs: int) -> int:
        self.rhs.append(rhs)
        return len(self.rhs) - 1

    def col(self, cost: int, upper: int, entries: dict[int, int], tag: tuple[int, int] | None = None) -> None:
        self.tags.append(tag)
        self.cost.append(cost)
        self.upper.append(upper)
        self.cols.append({r: a for r, a in entries.items() if a})

    def solve(self) -> tuple[float, list[float]]:
        """(objective, row duals as y >= 0 for the max problem) from HiGHS."""
        highspy = require_highs()
        h = _quiet_highs(highspy)
        lp = highspy.HighsLp()
        n, m = len(self.cost), len(self.rhs)
        lp.num_col_, lp.num_row_ = n, m
        # Minimise -c.v: HiGHS's duals of <= rows are then <= 0, and y = -dual.
        lp.col_cost_ = np.asarray([-c for c in self.cost], dtype=np.float64)
        lp.col_lower_ = np.zeros(n)
        lp.col_upper_ = np.asarray(self.upper, dtype=np.float64)
        lp.row_lower_ = np.full(m, -highspy.kHighsInf)
        lp.row_upper_ = np.asarray(self.rhs, dtype=np.float64)
        starts, index, value = [0], [], []
        for entries in self.cols:
            for r in sorted(entries):
                index.append(r)
                value.append(float(entries[r]))
            starts.append(len(index))
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = np.asarray(starts, dtype=np.int32)
        lp.a_matrix_.index_ = np.asarray(index, dtype=np.int32)
        lp.a_matrix_.value_ = np.asarray(value, dtype=np.float64)
        h.passModel(lp)
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            raise BoundUnavailable(
                f"HiGHS did not solve the bound LP: {h.modelStatusToString(h.getModelStatus())}"
            )
        sol = h.getSolution()
        self.primal = [float(v) for v in sol.col_value]
        value_ = -float(h.getInfo().objective_function_value)
        return value_, [max(0.0, -float(d)) for d in sol.row_dual]

    def certify(self, duals: Sequence[float]) -> Fraction:
        """b.y + sum_j u_j max(0, c_j - (A^T y)_j), exactly (see the module docstring). Floats are
        dyadic rationals, so every y_i is an integer over one common power of two and the sums are
        integer arithmetic."""
        fracs = [Fraction(v) if v > 0 else Fraction(0) for v in duals]
        scale = max((f.denominator for f in fracs), default=1)  # all powers of two: the largest divides
        y = [f.numerator * (scale // f.denominator) for f in fracs]
        total = sum(b * yi for b, yi in zip(self.rhs, y, strict=True) if yi)
        for cost, upper, entries in zip(self.cost, self.upper, self.cols, strict=True):
            reduced = cost * scale - sum(a * y[r] for r, a in entries.items())
            if reduced > 0:
                total += reduced * upper
        return Fraction(total, scale)


@dataclass(frozen=True)
class Relaxation:
    """The LP's optimal assignment: how many pods of each class it puts on each node type."""

    node_types: list[tuple[str, int, int, int]]  # (model, GPUs, CPU, memory) per type
    assignment: dict[tuple[int, int], float]  # (pod class, node type) -> pods
    pod_class: dict[str, int]  # pod name -> class


def lp_bound(
    nodes: Sequence[TraceNode],
    pods: Sequence[TracePod],
    capacity: int,
    min_placed: Mapping[int, int] | None = None,
) -> Bound:
    """The certified bound for placing any subset of `pods` on `nodes` (module docstring). With
    `min_placed` {milli: count}: for placements that place at least `count` one-GPU pods of `milli`
    each (what a protocol that places every pod that fits forces; see the README)."""
    return solve_bound(nodes, pods, capacity, min_placed)[0]


def solve_bound(
    nodes: Sequence[TraceNode],
    pods: Sequence[TracePod],
    capacity: int,
    min_placed: Mapping[int, int] | None = None,
) -> tuple[Bound, Relaxation]:
    """The bound and the LP's assignment behind it (for an explicit placement, `offline.py`). A floor
    of `min_placed` is a row -sum(z) <= -count: weak duality, and so the certificate, hold as before."""
    types = _node_types(nodes)
    classes = _pod_classes(pods)
    sizes = sorted({c.milli for c, _ in classes if c.fraction})
    patterns = maximal_patterns(sizes)
    lp = _Lp()
    pod_row = [lp.row(n) for _, n in classes]
    gpu_row = {ti: lp.row(t.gpus * t.count) for ti, t in enumerate(types) if t.gpus}
    cpu_row = {ti: lp.row(t.cpu * t.count) for ti, t in enumerate(types)}
    mem_row = {ti: lp.row(t.mem * t.count) for ti, t in enumerate(types)}
    floor_row = {m: lp.row(-k) for m, k in sorted((min_placed or {}).items()) if k > 0}
    if patterns is not None:
        slot_row = {(ti, s): lp.row(0) for ti in gpu_row for s in sizes}
    else:
        slot_row = {(ti, 0): lp.row(0) for ti in gpu_row}  # milli capacity: fractions <= 1000 x GPUs
    for ci, (c, n) in enumerate(classes):
        for ti, t in enumerate(types):
            if not c.fits(t):
                continue
            entries = {pod_row[ci]: 1, cpu_row[ti]: c.cpu, mem_row[ti]: c.mem}
            if c.gpus == 1 and c.milli in floor_row:
                entries[floor_row[c.milli]] = -1
            if c.fraction:
                entries[slot_row[(ti, c.milli if patterns is not None else 0)]] = (
                    1 if patterns is not None else c.milli
                )
            elif c.gpus:
                entries[gpu_row[ti]] = c.gpus
            lp.col(c.gpus * c.milli, n, entries, (ci, ti))
    for ti, t in enumerate(types):
        if ti not in gpu_row or not sizes:
            continue
        gpus = t.gpus * t.count
        if patterns is None:
            lp.col(0, gpus, {gpu_row[ti]: 1, slot_row[(ti, 0)]: -MILLI_PER_GPU})
            continue
        for pat in patterns:
            entries = {gpu_row[ti]: 1}
            entries.update({slot_row[(ti, s)]: -k for s, k in zip(sizes, pat, strict=True) if k})
            lp.col(0, gpus, entries)
    arrived = sum(p.gpu_request_milli for p in pods)
    index = {c: ci for ci, (c, _) in enumerate(classes)}
    relax = Relaxation(
        [(t.model, t.gpus, t.cpu, t.mem) for t in types], {}, {p.name: index[_class_of(p)] for p in pods}
    )
    if not lp.cost:
        return Bound(len(pods), arrived, capacity, 0.0, 0.0, len(patterns or ())), relax
    value, duals = lp.solve()
    certified = lp.certify(duals)
    for tag, v in zip(lp.tags, lp.primal, strict=True):
        if tag is not None and v > 1e-9:
            relax.assignment[tag] = v
    # Round up: the float must not fall below the exact certified value.
    up = math.nextafter(float(certified), math.inf)
    return Bound(len(pods), arrived, capacity, value, up, len(patterns or ())), relax
