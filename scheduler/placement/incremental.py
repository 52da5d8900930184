"""`place_one` for a long-lived state: feasibility and scores kept per pod demand, re-scored on changed rows.

Every placement changes one node; re-running the filters and the policy over all N nodes for the next pod
(as `place_one` does) repeats N-1 identical answers. `IncrementalPlacer` keeps, per distinct demand, the
feasible mask, the per-GPU fit and (for policies that declare `row_local`) the scores, and refreshes only
the rows whose `row_version` moved since that demand was last asked (`ClusterState.changed_rows`), through
a `RowView`: the very same kernels run, on a handful of rows instead of thousands.
The decision is the one `place_one` makes (same mask, same scores, ties to the lowest row).

Policies that are not row-local are still given the exact mask and fit, and are asked for their scores
over all rows each time (they may cache on their own, as `fgd` does).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from scheduler.backend import ArrayNamespace
from scheduler.model import Placement
from scheduler.placement.filters import feasible
from scheduler.placement.placer import TieBreak, best_row, placement_at
from scheduler.placement.policy import Array, PlacementPolicy
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays

# Above this share of the rows changed, recompute a demand over all rows (one big op beats many small).
FULL_REFRESH_SHARE = 0.25


@dataclass
class _Entry:
    version: int  # state.version it is current to
    mask: Array  # bool[C]
    fit: Array  # bool[C, G]
    score: Array | None  # float64[C], -inf where infeasible (row-local policies only)


def _scatter(xp: ArrayNamespace, dst: Array, rows: list[int], src: Array) -> None:
    """dst[rows] = src. The array API has no integer-array assignment: numpy and CuPy have it (one op);
    elsewhere (array-api-strict) row by row, rows being few."""
    if len(rows) > 1 and getattr(xp, "__name__", "") != "array_api_strict":
        dst[xp.asarray(rows, dtype=xp.int64), ...] = src
        return
    for i, r in enumerate(rows):
        dst[r, ...] = src[i, ...]


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
            _scatter(xp, entry.mask, rows, mask)
            if d.uses_gpu:
                _scatter(xp, entry.fit, rows, fit)
            if entry.score is not None:
                _scatter(xp, entry.score, rows, self._masked_scores(view, d, mask, fit))
        entry.version = s.version
        return entry

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
    ) -> Placement | None:
        """Where `d` goes now (not applied), exactly as `place_one` would choose; None when nowhere.
        `exclude`: bool[C] rows not to use now, as in `place_one`."""
        s = self.state
        xp = s.xp
        entry = self._refresh(d)
        row: int | None
        mask = entry.mask if exclude is None else entry.mask & ~exclude
        if entry.score is not None and tie_break == "first":
            # Scores are already -inf where infeasible: the first maximum is best_row's answer.
            score = entry.score
            if exclude is not None:
                score = xp.where(exclude, xp.full(score.shape, -float("inf"), dtype=xp.float64), score)
            row = int(xp.argmax(score))
            if not bool(score[row] > -float("inf")):
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
