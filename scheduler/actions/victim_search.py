"""The victim search: whom to evict so that a waiting job fits (shared by `reclaim` and `preempt`).

The candidates and their order are `victims.py`'s. A plan costs its evicted pods, then how far down that
order its last victim is: the search returns the cheapest plan it finds (the cheapest there is when it
completes within its bounds), and never one with a victim it could leave out.

The search is bounded by work (`scheduler/framework/budget.py`): each trial (a candidate set of victims evicted and
the job placed, then rolled back) spends one unit; sets checked by arithmetic alone are bounded apart
(`MAX_CHECKS`), so the same inputs always give the same plan.

- a job of one pod: per node, a depth-first search over the node's victims in order with backtracking,
  pruned by the best cost found and by the queue rules (a set a rule refuses only gets worse with more
  victims). Whether the pod fits once a set is gone is plain arithmetic on that node's row (`row_fit.py`):
  nothing is evicted or scored until the plan is chosen;
- a job of several pods (a gang): victims are added in order until the job fits, each try a trial in the
  caller's transaction (evict, place the members through the incremental placer, which re-scores only
  the rows the trial touched, roll back); then a bounded depth-first search looks for a cheaper set, and
  the last victims that turn out unnecessary are dropped.

Only the chosen plan is left applied in the transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scheduler.actions.row_fit import RowFit, freed_on
from scheduler.actions.topology_victims import domain_pools, topology_rows
from scheduler.actions.victims import Victim, evict, pod_count
from scheduler.actions.views import label, place_members, static_rows
from scheduler.framework.budget import Meter
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction
from scheduler.model.jobs import Job
from scheduler.model.types import PodInfo
from scheduler.state.demand import PodDemand, demand_for

MAX_VICTIM_UNITS = 32  # per waiting job: beyond this many victims, the plan is not worth the disruption
MAX_CHECKS = 4096  # per waiting job: sets of victims checked by arithmetic (trials spend the budget)

Cost = tuple[int, tuple[int, ...]]
Rule = Callable[[list[Victim]], str | None]  # None: the set is allowed; else the rule that refuses it


@dataclass
class VictimSearch:
    """One waiting job's search for victims, in the caller's transaction (one search per job and action)."""

    session: Session
    tx: Transaction
    job: Job  # the waiting job
    pods: list[PodInfo]  # its pending members
    count: int  # how many of them must be placed
    allowed: Rule  # queue rules on the set of victims (judged before the plan)
    message: str  # recorded on every eviction
    meter: Meter  # the work this job may spend
    room: Callable[[], str | None] = lambda: None  # rules that must hold once the victims are gone
    blocked: str | None = None  # a rule that refused a set of victims that would have made room
    _ranks: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _free_milli: int | None = field(default=None, init=False, repr=False)
    _checks: int = field(default=0, init=False, repr=False)
    _static: Any = field(default=None, init=False, repr=False)

    def run(self, pool: list[Victim]) -> list[Victim] | None:
        """Apply the cheapest plan found to the transaction and return its victims; None: nothing
        applied (`blocked` says which rule refused a plan that would have fit, if one did)."""
        self.cp = self.tx.checkpoint()
        if self._trial([], keep=True):  # room freed earlier in this action may already do
            return []
        d = demand_for(self.pods[0])
        rows = self._rows(d)
        pool = [v for v in pool if any(bool(rows[r]) for r in v.nodes)]
        if not pool:
            return None
        self._ranks = {v.key: i for i, v in enumerate(pool)}
        if self.count == 1 and len(self.pods) >= 1:
            return self._single(pool[:MAX_VICTIM_UNITS], d)
        # A gang that must sit in one domain: victims searched domain by domain (topology_victims.py).
        for part in domain_pools(self.session, self.job, pool) or [pool]:
            if (plan := self._gang(part[:MAX_VICTIM_UNITS])) is not None:
                return plan
        return None

    # ------------------------------------------------------------------------------------- helpers
    def _rows(self, d: PodDemand) -> Any:
        """bool[N]: nodes that could host the job's pods if they were empty, inside the domain its
        topology constraint allows (topology_placement.py)."""
        if self._static is None:
            rows = static_rows(self.session.state, d)
            within = topology_rows(self.session, self.job)
            self._static = rows if within is None else rows & within
        return self._static

    def _cost(self, victims: list[Victim]) -> Cost:
        return (pod_count(victims), tuple(sorted((self._ranks[v.key] for v in victims), reverse=True)))

    def _rule(self, victims: list[Victim]) -> str | None:
        return self.allowed(sorted(victims, key=lambda v: self._ranks[v.key]))

    def _trial(
        self, victims: list[Victim], *, keep: bool, row: int | None = None, probe: bool = False
    ) -> bool:
        """Evict `victims` and place the job (on `row` when given); keep the result or roll back.
        `probe`: try with the session's cheap placer (a search); the plan kept is placed by the policy,
        or by the probe if the policy's own choices leave a member out (the plan stands either way)."""
        self.meter.spend()
        self.tx.rollback_to(self.cp)
        evict(self.tx, victims, self.message, label(self.job))
        why = self.room()
        if why is not None:
            self.blocked = why
            ok = False
        elif row is not None:
            ok = self._place_on(row)
        else:
            ok = place_members(self.session, self.tx, self.job, self.pods, self.count, probe=probe)
            if not ok and keep and not probe:
                ok = place_members(self.session, self.tx, self.job, self.pods, self.count, probe=True)
        if not ok or not keep:
            self.tx.rollback_to(self.cp)
        return ok

    def _place_on(self, row: int) -> bool:
        pl = self.session.place_on(demand_for(self.pods[0]), row)
        if pl is None:
            return False
        self.tx.place(self.pods[0], self.job, pl)
        return True

    # ------------------------------------------------------------------------------ one pod: by node
    def _single(self, pool: list[Victim], d: PodDemand) -> list[Victim] | None:
        held = self.session.ledger.pods
        static = self._rows(d)
        by_row: dict[int, list[Victim]] = {}
        for v in pool:
            for r in sorted(v.nodes):
                if bool(static[r]):
                    by_row.setdefault(r, []).append(v)
        plans: list[tuple[Cost, int, list[Victim]]] = []
        best: list[Cost] = []

        for row in sorted(by_row):
            if self.meter.exhausted or self._checks >= MAX_CHECKS:
                break
            fit = RowFit.of(self.session, d, row, static)
            units = by_row[row]

            def fits(victims: list[Victim], fit: RowFit = fit, row: int = row) -> bool:
                self._checks += 1  # arithmetic, no trial: bounded apart from the budget
                return fit.fits(d, freed_on(held, row, victims))

            if not fit.ok or not fits(units):
                continue  # not even every victim here makes room

            def dfs(i: int, chosen: list[Victim], units: list[Victim] = units, row: int = row) -> None:
                if i == len(units) or self._checks >= MAX_CHECKS:
                    return
                v = units[i]
                trial = [*chosen, v]
                cost = self._cost(trial)
                if not best or cost < best[0]:
                    why = self._rule(trial)
                    if fits(trial):
                        if why is None:
                            best[:] = [cost]
                            plans.append((cost, row, trial))
                        else:
                            self.blocked = why
                    elif why is None:
                        dfs(i + 1, trial)
                    elif fits([*trial, *units[i + 1 :]]):
                        self.blocked = why
                dfs(i + 1, chosen)

            dfs(0, [])
        for i, (_, row, victims) in enumerate(sorted(plans, key=lambda p: (p[0], p[1]))):
            if i > 0 and self.meter.exhausted:
                break
            fit = RowFit.of(self.session, d, row, static)
            for v in list(reversed(victims)):  # a search cut short may keep one it does not need
                rest = [u for u in victims if u is not v]
                if rest and fit.fits(d, freed_on(held, row, rest)) and self._rule(rest) is None:
                    victims = rest
            if self._trial(victims, keep=True, row=row):
                return victims
        return None

    # --------------------------------------------------------------------- several pods: accumulate
    def _fits_somehow(self, victims: list[Victim]) -> bool:
        """A trial, unless the victims free too little GPU for the job even in total (no trial needed)."""
        if self._short(victims):
            return False
        return self._trial(victims, keep=False, probe=True)

    def _short(self, victims: list[Victim]) -> bool:
        d = demand_for(self.pods[0])
        if not d.uses_gpu:
            return False
        if self._free_milli is None:
            s, xp = self.session.state, self.session.xp
            rows = self._rows(d)
            usable = s.present & s.healthy & rows[:, None]
            self._free_milli = int(xp.sum(xp.where(usable, xp.astype(s.free_milli, xp.int64), 0)))
        held = self.session.ledger.pods
        freed = sum(
            g.milli for p in {p.uid: p for v in victims for p in v.pods}.values()
            if bool(self._static[(pl := held[p.uid].placement).node]) for g in pl.gpus
        )  # fmt: skip
        return self._free_milli + freed < self.count * d.num_gpus * max(d.gpu_milli, 1)

    def _gang(self, pool: list[Victim]) -> list[Victim] | None:
        chosen: list[Victim] = []
        refused: list[tuple[Victim, str]] = []
        found = False
        for v in pool:
            if self.meter.exhausted:
                break
            why = self._rule([*chosen, v])
            if why is not None:
                refused.append((v, why))
                continue
            chosen.append(v)
            if self._fits_somehow(chosen):
                found = True
                break
        if not found:
            if (
                refused
                and not self.meter.exhausted
                and self._fits_somehow([*chosen, *(v for v, _ in refused)])
            ):
                self.blocked = refused[0][1]
            return None
        best, best_cost = list(chosen), self._cost(chosen)
        for v in reversed(list(best)):  # drop what the plan does not need
            if len(best) == 1 or self.meter.exhausted:
                break
            trial = [c for c in best if c is not v]
            if self._rule(trial) is None and self._fits_somehow(trial):
                best, best_cost = trial, self._cost(trial)
        # Backtracking: a cheaper set further down the order (an older gang instead of two young pods).
        options = pool[:MAX_VICTIM_UNITS]

        def dfs(i: int, chosen: list[Victim]) -> None:
            nonlocal best, best_cost
            if i == len(options) or self.meter.exhausted:
                return
            trial = [*chosen, options[i]]
            cost = self._cost(trial)
            if cost < best_cost and self._rule(trial) is None:
                if self._fits_somehow(trial):
                    best, best_cost = trial, cost
                else:
                    dfs(i + 1, trial)
            dfs(i + 1, chosen)

        dfs(0, [])
        if not self._trial(best, keep=True):
            return None
        return best
