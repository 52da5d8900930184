"""`place_one` for a long-lived state: feasibility and scores kept per pod demand, re-scored on changed rows.

Every placement changes one node; re-running the filters and the policy over all N nodes for the next pod
(as `place_one` does) repeats N-1 identical answers. `IncrementalPlacer` keeps, per distinct demand, the
feasible mask, the per-GPU fit and (for policies that declare `row_local`) the scores, and refreshes only
the rows whose `row_version` moved since that demand was last asked (`ClusterState.changed_rows`), through
a `RowView`: the very same kernels run, on a handful of rows instead of thousands.
The decision is the one `place_one` makes (same mask, same scores, ties to the lowest row).

Policies that are not row-local are still given the exact mask and fit, and are asked for their scores
over all rows each time (they may cache on their own, as `fgd` does).

Batched decisions: pods of the same shape share one scoring pass. For a row-local policy the entry also
keeps its best rows (`top`, the first TOP_K in the order "highest score, then lowest row") from that pass;
a decision re-scores the rows changed since (a handful), drops them from `top` and puts back those whose new
place is ahead of `bound` (where `top` ended when it was made: every row not in it, unchanged since, comes
after that), and takes the first row of `top` that is not excluded. No pass over all rows per pod: `top` is
made again (one sort of the kept scores) only once it has run out, so a cycle costs one scoring pass per
shape, a re-scoring of the rows each placement changed, and a sort every TOP_K decisions of a shape.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.model.types import Placement
from scheduler.placement.filters import feasible
from scheduler.placement.placer import TieBreak, best_row, placement_at
from scheduler.placement.policy import Array, PlacementPolicy, scatter_rows
from scheduler.placement.preferences import blend
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays

# Above this share of the rows changed, recompute a demand over all rows (one big op beats many small).
FULL_REFRESH_SHARE = 0.25
# Best rows kept per demand between passes (a sort of all rows is made again when they run out).
TOP_K = 64
Key = tuple[float, int]  # (-score, row): smaller is better, ties to the lowest row
Prefer = Callable[[Array], Array | None]  # rows that pass -> the pod's preferences (None: none)


@dataclass
class _Entry:
    version: int  # state.version it is current to
    mask: Array  # bool[C]
    fit: Array  # bool[C, G]
    score: Array | None  # float64[C], -inf where infeasible (row-local policies only)
    # The best feasible rows by key, current to `version` (row-local policies; empty: make it again).
    top: list[Key] = field(default_factory=list)
    # The key of the last row `top` held when made (None: it held every feasible row).
    bound: Key | None = None
    made: bool = False  # `top` was made since the last full pass


class IncrementalPlacer:
    def __init__(self, state: ClusterState, policy: PlacementPolicy) -> None:
        self.state = state
        self.policy = policy
        self.row_local = policy.capabilities.row_local
        self._entries: dict[PodDemand, _Entry] = {}
        self._shape = (state.capacity, state.max_gpus)

    def _full(self, d: PodDemand) -> _Entry:
        s = self.state
        mask, fit = feasible(s, d)
        score = self._masked_scores(s, d, mask, fit) if self.row_local else None
        return _Entry(s.version, mask, fit, score)

    def _masked_scores(self, s: NodeArrays, d: PodDemand, mask: Array, fit: Array) -> Array:
        xp = s.xp
        raw = xp.astype(self.policy.score_nodes(s, d, mask, fit), xp.float64)
        return xp.where(mask, raw, xp.full(raw.shape, -float("inf"), dtype=xp.float64))

    def _refresh(self, d: PodDemand) -> _Entry:
        s = self.state
        if (s.capacity, s.max_gpus) != self._shape:  # arrays were re-allocated: nothing cached is valid
            self._shape = (s.capacity, s.max_gpus)
            self._entries.clear()
        entry = self._entries.get(d)
        if entry is not None and entry.version == s.version:
            return entry
        rows = None
        if entry is not None and s.version - entry.version <= FULL_REFRESH_SHARE * s.capacity:
            rows = s.changed_rows(entry.version)
        if entry is None or rows is None:
            entry = self._entries[d] = self._full(d)
            return entry
        if rows:
            xp, view = s.xp, s.take_rows(rows)
            mask, fit = feasible(view, d)
            scatter_rows(xp, entry.mask, rows, mask)
            if d.uses_gpu:
                scatter_rows(xp, entry.fit, rows, fit)
            if entry.score is not None:
                scores = self._masked_scores(view, d, mask, fit)
                scatter_rows(xp, entry.score, rows, scores)
                if entry.made:
                    _retop(entry, rows, s.host(scores).tolist())
        entry.version = s.version
        return entry

    def _make_top(self, entry: _Entry) -> None:
        """The first TOP_K feasible rows by key, from the kept scores (one stable sort)."""
        xp, s = self.state.xp, self.state
        assert entry.score is not None
        order = s.host(xp.argsort(-entry.score, stable=True))[:TOP_K].tolist()
        scores = s.host(entry.score)
        entry.top = [(-float(scores[r]), int(r)) for r in order if scores[r] > -float("inf")]
        entry.bound = entry.top[-1] if len(entry.top) == TOP_K else None
        entry.made = True

    def _best(self, entry: _Entry, exclude: Array | None) -> int | None:
        """The first row of `top` not excluded, as argmax over all rows would answer."""
        if not entry.made or (not entry.top and entry.bound is not None):
            self._make_top(entry)
        for _, row in entry.top:
            if exclude is None or not bool(exclude[row]):
                return row
        if entry.bound is None:
            return None  # every feasible row is in `top`, and all are excluded
        xp = self.state.xp
        assert entry.score is not None
        score = entry.score
        if exclude is not None:  # all the best are excluded: look at every row
            score = xp.where(exclude, xp.full(score.shape, -float("inf"), dtype=xp.float64), score)
        row = int(xp.argmax(score))
        return row if bool(score[row] > -float("inf")) else None

    def feasible(self, d: PodDemand) -> tuple[Array, Array]:
        """(bool[C] nodes `d` fits now, bool[C, G] GPUs it fits): `filters.feasible`'s answer, from the
        per-demand cache (read only: it is the placer's own)."""
        entry = self._refresh(d)
        return entry.mask, entry.fit

    def place(
        self,
        d: PodDemand,
        *,
        exclude: Array | None = None,
        tie_break: TieBreak = "first",
        rng: random.Random | None = None,
        prefer: Prefer | None = None,
    ) -> Placement | None:
        """Where `d` goes now (not applied), exactly as `place_one` would choose; None when nowhere.
        `exclude`: bool[C] rows not to use now, as in `place_one`. `prefer`: the pod's preferences over the
        rows that pass (float64[C] in [0, 1], or None: none), blended with the policy's scores
        (`preferences.blend`)."""
        s = self.state
        xp = s.xp
        entry = self._refresh(d)
        row: int | None
        mask = entry.mask if exclude is None else entry.mask & ~exclude
        preference = prefer(mask) if prefer is not None else None
        if preference is not None:
            base = entry.score if entry.score is not None else self.policy.score_nodes(s, d, mask, entry.fit)
            scores = blend(xp, xp.where(mask, base, xp.zeros_like(base)), preference, mask, gpu=d.uses_gpu)
            row = best_row(xp, scores, mask, tie_break=tie_break, rng=rng)
        elif entry.score is not None and tie_break == "first":
            # Scores are -inf where infeasible: the first maximum (best_row's answer) is the head of `top`.
            row = self._best(entry, exclude)
            if row is None:
                return None
        elif entry.score is not None:
            row = best_row(xp, entry.score, mask, tie_break=tie_break, rng=rng)
        else:
            scores = self.policy.score_nodes(s, d, mask, entry.fit)
            row = best_row(xp, scores, mask, tie_break=tie_break, rng=rng)
        if row is None:
            return None
        if not d.uses_gpu:
            slots: list[int] = []
        elif self.row_local:  # the choice inside a node depends on that node alone: give it just that row
            slots = self.policy.pick_gpus(s.take_rows([row]), 0, d, entry.fit[row : row + 1, ...])
        else:
            slots = self.policy.pick_gpus(s, row, d, entry.fit)
        return placement_at(s, row, slots, d)


def _retop(entry: _Entry, rows: list[int], scores: list[float]) -> None:
    """`rows` were re-scored: their old places in `top` go; each comes back if its new key is ahead of
    `bound` (rows after it are found by the next sort, when `top` runs out)."""
    changed = set(rows)
    top = [k for k in entry.top if k[1] not in changed]
    for row, score in zip(rows, scores, strict=True):
        if score > -float("inf"):
            key = (-score, row)
            if entry.bound is None or key < entry.bound:
                bisect.insort(top, key)
    if len(top) > 2 * TOP_K:  # keep it short: what is cut off comes after the new bound
        top = top[:TOP_K]
        entry.bound = top[-1]
    entry.top = top
