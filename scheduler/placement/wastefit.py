"""`wastefit`: fragfit plus a look-ahead of the waste a fraction leaves on its GPU (this project's policy).

FGD and fragfit judge a GPU's free milli by whether the typical task types fit in it *now*. That fills
any gap, even when what is left is dead: a 320-milli pod on the 530 milli a 470 left behind leaves 210
that almost nothing fills, where a later 470 would have left 60. wastefit scores, per GPU, the change
in the *expected eventual waste* of that GPU's free milli under the arrival distribution:

* W(h), the expected milli a GPU with h free still has free when the cluster fills up, is an optimal-
  stopping recursion over the fraction sizes s with arrival probability q_s: each arrival ends the wait
  with probability `eps` (the gap is then wasted); otherwise a fitting size may be accepted (the gap
  becomes h - s) when that lowers the expectation. So W(h) <= h, and W(h) = h below the smallest size.
* Sizes are made scarcer by competition (`availability`): every fraction that opens a whole GPU leaves
  a gap of 1000 - s that only smaller sizes fill, and a greedy pairing estimates which sizes more gaps
  want than arrive (openb: the <= 160-milli pods, wanted by the 190 milli every 810 leaves, ten times
  more than arrive); their q_s is scaled by supply / claims.
* Placing s on a GPU with f free changes the expected waste by dW = W(f - s) - W(f), with W(1000) := 0
  (a whole GPU is no waste: whole-GPU pods take it), so opening one costs W(1000 - s). A fraction's
  score on each GPU is fragfit's minus `waste_weight` x dW, outside the sigmoid so that large
  differences are not flattened; the node's score is its best GPU's, and the pod goes on that GPU.
* The best-fit pull is weaker than fragfit's and blends best fit's *raw* score (the row's own, so it
  stays in the cached scores); a placement on a GPU model that model-constrained pods will need is
  charged as extra fragment (`scarcity.py`); where the learned workload's pinned pods alone want more of
  a model than the cluster has, a fraction there is also charged for the pinned demand it displaces.

The size distribution comes from the un-inflated pod list with every task type (the fragment keeps the
usual 95% typical workload), which the protocol gives every policy; the live scheduler, which learns its
workload, builds the table from what it has learned. Why each term and weight is what it is, with the
replay figures that chose them: docs/wastefit.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.placement.bestfit import MAX_SPEC_CPU, MAX_SPEC_GPU, NODE_SCORE_MAX
from scheduler.placement.fragfit import FragFitPolicy
from scheduler.placement.fragment_policy import NodeView
from scheduler.placement.policy import Array
from scheduler.placement.workload import DEFAULT_COVERAGE, TaskType, TypicalWorkload
from scheduler.state.backend import ArrayNamespace
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays

EPS = 0.001  # chance per arrival that a waiting gap's time is up (0.0005..0.002 measured equivalent)
WASTE_WEIGHT = 1.6  # score units per milli of expected waste (the sigmoid's slope at 0 is 0.025 per milli)
PULL = 1.0  # best-fit blend, as in fragfit
# Expected-waste milli per milli a fraction takes on a model whose constrained demand overflows it, at
# pressure 2 (the cap); (pressure - 1) of that below, nothing at pressure <= 1 (module docstring).
OVERFLOW_WEIGHT = 1.0


def size_distribution(workload: TypicalWorkload) -> dict[int, float]:
    """Arrival probability of each fractional GPU size (one device below a whole GPU), per pod."""
    out: dict[int, float] = {}
    for t, p in zip(workload.types, workload.popularity, strict=True):
        if t.num_gpus == 1 and 0 < t.gpu_milli < MILLI_PER_GPU:
            out[t.gpu_milli] = out.get(t.gpu_milli, 0.0) + p
    return out


def availability(sizes: dict[int, float]) -> dict[int, float]:
    """Share of each size's arrivals a gap can count on, from a greedy pairing estimate: the largest
    sizes open whole GPUs first, and each gap they leave (1000 - a) claims one item from the largest
    unclaimed sizes that fit (a size pairing with itself: half open, half fill). A size claimed more often
    than it arrives is scarce: its share is supply / claims (openb: the <= 160-milli pods, wanted by the
    190 milli of every 810, get about 0.07)."""
    left = dict(sizes)
    asked = dict.fromkeys(sizes, 0.0)
    for a in sorted(sizes, reverse=True):
        opening = left[a] / 2 if 2 * a <= MILLI_PER_GPU else left[a]
        left[a] -= opening
        need = opening
        for b in sorted((b for b in sizes if b <= MILLI_PER_GPU - a), reverse=True):
            if need <= 1e-15:
                break
            asked[b] += need
            take = min(need, left[b])
            left[b] -= take
            need -= take
    return {s: (min(1.0, p / asked[s]) if asked[s] > 0 else 1.0) for s, p in sizes.items()}


def expected_waste(sizes: dict[int, float], eps: float = EPS) -> list[float]:
    """W[h] for h = 0..1000 (see the module docstring)."""
    avail = availability(sizes)
    items = [(s, sizes[s] * avail[s]) for s in sorted(sizes)]
    w = [0.0] * (MILLI_PER_GPU + 1)
    for h in range(1, MILLI_PER_GPU + 1):
        fits = sorted((w[h - s], q) for s, q in items if s <= h)
        best = float(h)
        mass = acc = 0.0
        for value, q in fits:  # accept the best continuations first; stop when one more hurts
            mass += q
            acc += q * value
            cand = (eps * h + (1.0 - eps) * acc) / (1.0 - (1.0 - eps) * (1.0 - mass))
            if cand >= best:
                break
            best = cand
        w[h] = best
    return w


def top_share(workload: TypicalWorkload, coverage: float) -> TypicalWorkload:
    """The most popular types covering `coverage` of pods, renormalised, ranked as
    `TypicalWorkload.from_counts` ranks them (popularity, then type)."""
    ranked = sorted(zip(workload.types, workload.popularity, strict=True), key=lambda tp: (-tp[1], tp[0]))
    kept: list[tuple[TaskType, float]] = []
    covered = 0.0
    total = sum(workload.popularity)
    for task, p in ranked:
        if covered >= coverage * total - 1e-12:
            break
        kept.append((task, p))
        covered += p
    if not kept:
        return workload
    return TypicalWorkload(
        tuple(t for t, _ in kept), tuple(p / covered for _, p in kept), workload.memory_per_gpu
    )


@dataclass
class WasteFitPolicy(FragFitPolicy):
    name: ClassVar[str] = "wastefit"
    waste_weight: float = WASTE_WEIGHT
    eps: float = EPS
    pull: float = PULL
    coverage: float = 1.0  # the replay hands over every task type; the fragment keeps the usual 95%
    fragment_coverage: float = DEFAULT_COVERAGE
    overflow_weight: float = OVERFLOW_WEIGHT
    raw_blend: bool = True  # best fit's raw score in the kernel (False: min-max normalised, as fragfit)
    _full_workload: TypicalWorkload | None = field(default=None, init=False, repr=False)
    _table: tuple[TypicalWorkload | None, Array] = field(default=(None, None), init=False, repr=False)
    _overflow: tuple[Array | None, Array | None] = field(default=(None, None), init=False, repr=False)

    def set_typical_workload(self, workload: TypicalWorkload) -> None:
        self._full_workload = workload
        super().set_typical_workload(top_share(workload, self.fragment_coverage))

    def waste_table(self, xp: ArrayNamespace) -> Array:
        """float64[1001]: W[h], with W[1000] = 0; rebuilt when the workload changes (learned online)."""
        wl = self._full_workload or self.workload
        if self._table[1] is None or self._table[0] is not wl:
            table = expected_waste(size_distribution(wl), self.eps) if wl is not None else []
            table = table[:MILLI_PER_GPU] if table else [float(h) for h in range(MILLI_PER_GPU)]
            self._table = (wl, xp.asarray([*table, 0.0], dtype=xp.float64))
        return self._table[1]

    def waste_change(self, xp: ArrayNamespace, free: Array, need: Array) -> Array:
        """float64[R, G]: W(free - need) - W(free) per GPU (GPUs the pod does not fit are masked later;
        free milli is at most 1000, and below 0 reads as 0)."""
        table = self.waste_table(xp)
        shape = free.shape
        left = xp.maximum(free - need[:, None], xp.zeros((), dtype=free.dtype))
        w_now = xp.reshape(xp.take(table, xp.reshape(free, (-1,))), shape)
        w_left = xp.reshape(xp.take(table, xp.reshape(left, (-1,))), shape)
        return w_left - w_now

    def overflow_waste(self, xp: ArrayNamespace, view: NodeView) -> Array | None:
        """float64[R]: expected waste per row, in milli, of the milli a fraction takes on that row's model:
        `overflow_weight` x (pressure - 1), clipped to [0, 1], x milli taken. None without a model the
        learned workload overflows (no constrained types, or every pressure <= 1)."""
        table = self._pressure[1]
        if table is None or not self.overflow_weight:
            return None
        if self._overflow[0] is not table:
            over = xp.clip(table - 1.0, 0.0, 1.0)
            self._overflow = (table, over if bool(xp.any(over > 0.0)) else None)
        over = self._overflow[1]
        if over is None:
            return None
        return self.overflow_weight * xp.take(over, view.model) * xp.astype(view.need, xp.float64)

    def row_term(self, xp: ArrayNamespace, v: NodeView, d: PodDemand) -> Array | None:
        if not self.raw_blend or not self.pull:
            return None
        # `bestfit._raw`, in floats throughout (the same values: integers below 2^53, and a
        # truncated float is the integer it truncates to), for fewer array operations per decision.
        f64 = xp.float64
        cpu_left = xp.astype(v.cpu, f64) - float(d.cpu_milli)
        gpu_left = xp.astype(v.total(xp), f64) - float(d.num_gpus * d.gpu_milli)
        waste = 0.5 * cpu_left / MAX_SPEC_CPU + 0.5 * gpu_left / MAX_SPEC_GPU
        return self.pull * xp.trunc((1.0 - waste) * NODE_SCORE_MAX) / 100.0

    def trained_scores(self, state: NodeArrays, d: PodDemand, feasible: Array, fit: Array) -> Array:
        if self.raw_blend:  # the blend is in the cached scores (`row_term`): nothing over all rows here
            return self.primary_scores(state, d)
        return super().trained_scores(state, d, feasible, fit)

    def transform(
        self, xp: ArrayNamespace, before: Array, after: Array, view: NodeView, d: PodDemand
    ) -> Array:
        gain = before - after
        cost = self.pressure_cost(xp, view, d)
        if cost is not None:
            gain = gain - (cost[:, None] if len(gain.shape) == 2 else cost)
        fraction = len(gain.shape) == 2  # one column per GPU the fraction could go on
        changes = self.shortfall_changes(xp, view, d)
        if changes:
            extra = changes[0]
            for change in changes[1:]:
                extra = extra + change
            gain = gain + (extra[:, None] if fraction else extra)
        score = 100.0 / (1.0 + xp.exp(gain / -float(MILLI_PER_GPU)))
        if fraction and self.waste_weight:
            waste = self.waste_change(xp, view.free, view.need)
            overflow = self.overflow_waste(xp, view)
            if overflow is not None:
                waste = waste + overflow[:, None]
            score = score - self.waste_weight * waste
        return score
