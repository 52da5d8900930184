"""`place_one` for a long-lived state: feasibility and scores kept per pod demand, re-scored on touched rows.

Every placement changes one node; re-running the filters and the policy over all N nodes for the next pod
(as `place_one` does) repeats N-1 identical answers. `IncrementalPlacer` keeps, per distinct demand, the
feasible mask, the per-GPU fit and (for policies whose score of a node depends on that node alone) the
scores, and refreshes only the rows changed since that demand was last asked — through
`ClusterState.take_rows`, so the very same kernels run, on a handful of rows instead of thousands.
The decision is the one `place_one` makes (same mask, same scores, ties to the lowest row).

Policies not known to be row-local are still given the exact mask and fit, and are asked for their
scores over all rows each time (they may cache on their own, as `fgd` does).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from scheduler.backend import ArrayNamespace
from scheduler.model import Placement
from scheduler.placement.filters import feasible
from scheduler.placement.placer import TieBreak, best_row
from scheduler.placement.policy import PlacementPolicy
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand

Array = Any

# Policies whose node score is a pure function of that node's row (safe to cache and patch per row).
ROW_LOCAL_POLICIES = frozenset({"binpack", "spread"})
# Above this share of the rows changed, recompute a demand over all rows (one big op beats many small).
FULL_REFRESH_SHARE = 0.25
_LOG_TRIM = 1 << 16


@dataclass
class _Entry:
    pos: int  # position in the touch log this entry is current to
    version: int  # state.version it was current at
    mask: Array  # bool[C]
    fit: Array  # bool[C, G]
    score: Array | None  # float64[C], -inf where infeasible (row-local policies only)


def is_row_local(policy: PlacementPolicy) -> bool:
    """A policy says so with a `row_local` attribute (it may change, e.g. while a workload is learned);
    without one, the known pure policies are."""
    flag = getattr(policy, "row_local", None)
    return bool(flag) if flag is not None else policy.name in ROW_LOCAL_POLICIES


def policy_token(policy: PlacementPolicy) -> tuple[bool, int]:
    """Changes whenever cached scores may have gone stale everywhere: the policy stopped (or started)
    being row-local, or its typical workload (fragment-based policies) was replaced."""
    return is_row_local(policy), id(getattr(policy, "workload", None))


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
        self._token = policy_token(policy)
        self.row_local = self._token[0]
        self._entries: dict[PodDemand, _Entry] = {}
        self._log: list[int] = []  # rows in the order they were touched
        self._log_base = 0  # log position of self._log[0] (older positions were trimmed)
        self._shape = (state.capacity, state.max_gpus)
        state.take_touched()  # from here on every change is seen through the log

    def _sync(self) -> None:
        s = self.state
        if (s.capacity, s.max_gpus) != self._shape:  # arrays were re-allocated: nothing cached is valid
            self._shape = (s.capacity, s.max_gpus)
            self._entries.clear()
        token = policy_token(self.policy)
        if token != self._token:
            self._token, self.row_local = token, token[0]
            self._entries.clear()
        touched = s.take_touched()
        if touched:
            self._log.extend(touched)
            if len(self._log) > _LOG_TRIM:
                drop = len(self._log) // 2
                del self._log[:drop]
                self._log_base += drop

    def _full(self, xp: ArrayNamespace, d: PodDemand) -> _Entry:
        s = self.state
        mask, fit = feasible(xp, s, d)
        score = self._masked_scores(xp, s, d, mask, fit) if self.row_local else None
        return _Entry(self._log_base + len(self._log), s.version, mask, fit, score)

    def _masked_scores(
        self, xp: ArrayNamespace, s: ClusterState, d: PodDemand, mask: Array, fit: Array
    ) -> Array:
        raw = xp.astype(self.policy.score_nodes(xp, s, d, mask, fit), xp.float64)
        return xp.where(mask, raw, xp.full(raw.shape, -float("inf"), dtype=xp.float64))

    def _refresh(self, xp: ArrayNamespace, d: PodDemand) -> _Entry:
        s = self.state
        entry = self._entries.get(d)
        end = self._log_base + len(self._log)
        if entry is not None and entry.version == s.version:
            return entry
        if entry is None or entry.pos < self._log_base or end - entry.pos > FULL_REFRESH_SHARE * s.capacity:
            entry = self._entries[d] = self._full(xp, d)
            return entry
        rows = sorted(set(self._log[entry.pos - self._log_base :]))
        if rows:
            view = s.take_rows(rows)
            mask, fit = feasible(xp, view, d)
            _scatter(xp, entry.mask, rows, mask)
            if d.uses_gpu:
                _scatter(xp, entry.fit, rows, fit)
            if entry.score is not None:
                _scatter(xp, entry.score, rows, self._masked_scores(xp, view, d, mask, fit))
        entry.pos, entry.version = end, s.version
        return entry

    def place(
        self,
        xp: ArrayNamespace,
        d: PodDemand,
        *,
        tie_break: TieBreak = "first",
        rng: random.Random | None = None,
    ) -> Placement | None:
        """Where `d` goes now (not applied), exactly as `place_one` would choose; None when nowhere."""
        self._sync()
        s = self.state
        entry = self._refresh(xp, d)
        row: int | None
        if entry.score is not None and tie_break == "first":
            # Scores are already -inf where infeasible: the first maximum is best_row's answer.
            row = int(xp.argmax(entry.score))
            if not bool(entry.score[row] > -float("inf")):
                return None
        elif entry.score is not None:
            row = best_row(xp, entry.score, entry.mask, tie_break=tie_break, rng=rng)
        else:
            scores = self.policy.score_nodes(xp, s, d, entry.mask, entry.fit)
            row = best_row(xp, scores, entry.mask, tie_break=tie_break, rng=rng)
        if row is None:
            return None
        if not d.uses_gpu:
            slots: list[int] = []
        elif self.row_local:  # the choice inside a node depends on that node alone: give it just that row
            slots = self.policy.pick_gpus(xp, s.take_rows([row]), 0, d, entry.fit[row : row + 1, ...])
        else:
            slots = self.policy.pick_gpus(xp, s, row, d, entry.fit)
        shares = tuple(s.share_for(row, slot, d.gpu_milli, d.gpu_mib) for slot in slots)
        return Placement(node=row, gpus=shares, cpu_milli=d.cpu_milli, memory_mib=d.memory_mib)
