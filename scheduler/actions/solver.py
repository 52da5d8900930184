"""One victim solver for every action that makes room: reclaim, preempt, consolidation and topology
consolidation (KAI Scheduler's `solvers.NewJobsSolver(nodes, validator, victimsQueue, action)`).

A `VictimSolver` is made for one waiting job with
- a victim source: the candidate units, most expendable first (`victims.py`): the preemptible jobs of the
  queues reclaim may take from, or of the same queue for preempt (in KAI's victim order), the pods that may
  move (`victims.movable`, the one rule: single pods a controller owns) for consolidation;
- a validator (`Validator`), the action's rules: which sets of victims may be taken (`allowed`, judged on
  the set before any trial), what must hold once they are gone (`room`), and what becomes of them once the
  waiting job is placed (`settle`): evicted for good (`Evictions`: reclaim, preempt), or each moved to a
  new place planned in advance, never the one it has (`Moves`: consolidation; a set whose pods cannot all be
  re-placed is no plan);
and every set it considers is tried the same way (`_attempt`): evict it in the caller's transaction, check
the room rules, place the waiting job, settle the victims; then keep it or roll it back. What differs
between actions is which sets are tried and in which order (KAI builds scenarios for the same purpose):

- `solve` (reclaim, preempt): the cheapest plan, its evicted pods first, then how far down the victim
  order its last victim is; never one with a victim it could leave out. A job of one pod: per node, a
  depth-first search over the node's victims in order with backtracking, pruned by the best cost found and
  by the rules (a set a rule refuses only gets worse with more victims). A job of several pods (a gang):
  victims added in order until the job fits, each a trial (evict, place the members through the
  incremental placer, roll back); then a bounded depth-first search for a cheaper set, and the last
  victims that turn out unnecessary dropped;
- `on_nodes` (consolidation): node by node, the smallest sets of movable pods whose going lets the pod fit
  there; the cheapest plan over the nodes tried (fewest moves, then the lowest priority, then the youngest);
- `in_domain` (topology consolidation): movable pods taken off one domain, the emptiest nodes' and the
  smallest first, until the gang fits there by count.

Whether one pod fits once a set is gone is arithmetic on its node's row (`row_fit.py`), so sets are judged
before any is tried. Searches are bounded by work (`scheduler/framework/budget.py`): each trial spends one
unit; sets checked by arithmetic alone are bounded apart (`MAX_CHECKS`), so the same inputs always give the
same plan. Only the chosen plan is left applied in the transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Protocol

from scheduler.actions.row_fit import RowFit, freed_on
from scheduler.actions.topology_placement import GangFit, Scope
from scheduler.actions.topology_victims import domain_pools, topology_rows
from scheduler.actions.victims import Victim, evict, pod_count
from scheduler.actions.views import label, place_members, static_rows
from scheduler.framework.budget import Meter
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction
from scheduler.model.constraints import PodScope
from scheduler.model.jobs import Job
from scheduler.model.types import Placement, PodInfo
from scheduler.placement.policy import Array
from scheduler.state.demand import PodDemand, demand_for

MAX_VICTIM_UNITS = 32  # per waiting job: beyond this many victims, the plan is not worth the disruption
MAX_CHECKS = 4096  # per waiting job: sets of victims checked by arithmetic (trials spend the budget)
MAX_MOVES = 8  # consolidation: pods moved for one waiting pod
MAX_ROWS = 16  # consolidation: nodes tried per waiting pod, those with the most free GPU first
MAX_SETS_PER_ROW = 8  # consolidation: sets of the smallest size tried on one node before the next node
MAX_DOMAIN_MOVES = 16  # topology consolidation: pods moved per plan

Cost = tuple[int, tuple[int, ...]]
Rule = Callable[[list[Victim]], str | None]  # None: the set is allowed; else the rule that refuses it
Move = tuple[Victim, Placement]  # a moved victim and its new place


class Validator(Protocol):
    """An action's rules for a set of victims (KAI's solution validator)."""

    def allowed(self, victims: list[Victim]) -> str | None:
        """None when the set may be taken; else the rule that refuses it (judged before any trial)."""
        ...

    def room(self) -> str | None:
        """None when what must hold once the victims are gone holds; else why not."""
        ...

    def settle(self, solver: VictimSolver, old: dict[str, Placement], victims: list[Victim], *,
               probe: bool) -> list[Move] | None:  # fmt: skip
        """Once the waiting job is placed: what becomes of the victims (in the solver's transaction);
        None when the plan does not hold. `old`: where each victim was."""
        ...


@dataclass(frozen=True)
class Evictions:
    """Reclaim and preempt: the queue rules on the set (`rule`) and once it is gone (`limits`); the victims
    are evicted for good."""

    rule: Rule = lambda _victims: None
    limits: Callable[[], str | None] = lambda: None

    def allowed(self, victims: list[Victim]) -> str | None:
        return self.rule(victims)

    def room(self) -> str | None:
        return self.limits()

    def settle(self, solver: VictimSolver, old: dict[str, Placement], victims: list[Victim], *,
               probe: bool) -> list[Move] | None:  # fmt: skip
        return []


@dataclass(frozen=True)
class Moves:
    """Consolidation: no queue loses anything, so any set may be taken, but each victim must get a new place
    (within `within`, None: anywhere), never the one it has, the hardest to fit first (`order`): a
    reservation its recreated pod is bound to."""

    within: Array | None = None
    order: Callable[[Victim], Any] = lambda v: (-v.usage.gpu, v.key)

    def allowed(self, victims: list[Victim]) -> str | None:
        return None

    def room(self) -> str | None:
        return None

    def settle(self, solver: VictimSolver, old: dict[str, Placement], victims: list[Victim], *,
               probe: bool) -> list[Move] | None:  # fmt: skip
        session, moves = solver.session, []
        for v in sorted(victims, key=self.order):
            dv = demand_for(v.pods[0])
            new = session.probe_place(dv, self.within) if probe else session.place(dv, self.within)
            if new is None or new == old[v.key]:
                return None  # no place for it, or only the one it has (moving it would gain nothing)
            solver.tx.reserve(v.pods[0], v.job, new, label(solver.job))
            moves.append((v, new))
        return moves


@dataclass
class Plan:
    """Consolidation's plan: its cost, the moves, and the waiting pod's place."""

    cost: tuple[int, int, float]
    moves: list[Move]
    placement: Placement


@dataclass
class VictimSolver:
    """One waiting job's search for victims, in the caller's transaction (one search per job and action)."""

    session: Session
    tx: Transaction
    job: Job  # the waiting job
    pods: list[PodInfo]  # its pending members
    count: int  # how many of them must be placed
    validator: Validator  # the action's rules (Evictions, Moves)
    message: str  # recorded on every eviction
    meter: Meter  # the work this job may spend
    blocked: str | None = None  # a rule that refused a set of victims that would have made room
    _ranks: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _free_milli: int | None = field(default=None, init=False, repr=False)
    _checks: int = field(default=0, init=False, repr=False)
    _static: Any = field(default=None, init=False, repr=False)

    # ------------------------------------------------------------------------------- one trial, for all
    def _attempt(
        self, victims: list[Victim], place: Callable[[], bool], *, probe: bool, message: str,
        validator: Validator | None = None,
    ) -> list[Move] | None:  # fmt: skip
        """Evict `victims` (with `message`), check the room rules, place the waiting job (`place`), settle
        the victims (by `validator`, default the solver's). What it did stays in the transaction (the caller
        keeps it or rolls it back); None when it did not hold (`blocked` says which rule refused, if one
        did)."""
        rules = validator or self.validator
        ledger = self.session.ledger
        old = {v.key: pl for v in victims if (pl := ledger.placement(v.pods[0].uid)) is not None}
        evict(self.tx, victims, message, label(self.job))
        why = rules.room()
        if why is not None:
            self.blocked = why
            return None
        if not place():
            return None
        return rules.settle(self, old, victims, probe=probe)

    # -------------------------------------------------------------------------- reclaim and preempt
    def solve(self, pool: list[Victim]) -> list[Victim] | None:
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
        return self.validator.allowed(sorted(victims, key=lambda v: self._ranks[v.key]))

    def _trial(
        self, victims: list[Victim], *, keep: bool, row: int | None = None, probe: bool = False
    ) -> bool:
        """Evict `victims` and place the job (on `row` when given); keep the result or roll back.
        `probe`: try with the session's cheap placer (a search); the plan kept is placed by the policy,
        or by the probe if the policy's own choices leave a member out (the plan stands either way)."""
        self.meter.spend()
        self.tx.rollback_to(self.cp)

        def place() -> bool:
            if row is not None:
                return self._place_on(row)
            ok = place_members(self.session, self.tx, self.job, self.pods, self.count, probe=probe)
            if not ok and keep and not probe:
                ok = place_members(self.session, self.tx, self.job, self.pods, self.count, probe=True)
            return ok

        ok = self._attempt(victims, place, probe=probe, message=self.message) is not None
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

    # ----------------------------------------------------------------------------------- consolidation
    def on_nodes(self, pod: PodInfo, movable: list[Victim]) -> bool:
        """Make room for `pod` by moving some of `movable` (consolidation, `Moves`): node by node, the
        cheapest plan over the nodes tried is applied (evictions, the pod's place, the moved pods' new
        places); False: nothing applied."""
        session, job, tx = self.session, self.job, self.tx
        s, ledger = session.state, session.ledger
        d = demand_for(pod)
        by_node: dict[int, list[Victim]] = {}
        # per demand (and its pod's constraints), bool[N]: nodes with room for it now (another GPU)
        elsewhere: dict[tuple[PodDemand, PodScope | None], Any] = {}
        for v in movable:
            held = ledger.placement(v.pods[0].uid)
            assert held is not None
            dv, row = demand_for(v.pods[0]), held.node
            if (dv, dv.scope) not in elsewhere:
                elsewhere[(dv, dv.scope)] = session.feasible(dv)[0]
            if not bool(session.xp.any(elsewhere[(dv, dv.scope)])):
                continue  # no GPU has room for it now, even on its own node: it cannot move (saves trials)
            by_node.setdefault(row, []).append(v)
        static = static_rows(s, d)
        fits: dict[int, RowFit] = {}
        for r in by_node:
            if bool(static[r]):
                fit = RowFit.of(session, d, r, static)
                if fit.fits(d, freed_on(ledger.pods, r, by_node[r])):
                    fits[r] = fit
        order = sorted(fits, key=lambda r: (-sum(s.node_gpu_row(r)), r))[:MAX_ROWS]
        best: Plan | None = None
        for row in order:  # every node tried: the cheapest plan wins, not the first found
            if self.meter.exhausted:
                break
            # The pods most expendable first: lowest priority, then the youngest.
            units = sorted(by_node[row], key=lambda v: (v.job.priority, -v.job.created_s, v.key))[:MAX_MOVES]
            plan = self._fewest_on(pod, row, fits[row], units, best)
            if plan is not None and (best is None or plan.cost < best.cost):
                best = plan
        if best is None:
            return False
        for v, new in best.moves:
            to = f"{s.node_names[new.node]} GPU {','.join(str(g.slot) for g in new.gpus)}"
            evict(tx, [v], f"moved to {to} to make room for {label(job)} (consolidation)", label(job))
        tx.place(pod, job, best.placement, "placed after consolidation")
        for v, new in best.moves:
            tx.reserve(v.pods[0], v.job, new, label(job))
        return True

    def _fewest_on(
        self, pod: PodInfo, row: int, fit: RowFit, units: list[Victim], best: Plan | None
    ) -> Plan | None:
        """The cheapest plan that makes room on `row`: the smallest sets of `units` whose going lets the pod
        fit there (arithmetic), each tried for new places of its pods (a trial, rolled back)."""
        d = demand_for(pod)
        ledger = self.session.ledger
        for size in range(1, len(units) + 1):
            if best is not None and size > best.cost[0]:
                return None
            tried = 0
            for group in combinations(units, size):  # the most expendable sets of this size first
                if self.meter.exhausted or tried >= MAX_SETS_PER_ROW:
                    return None
                if not fit.fits(d, freed_on(ledger.pods, row, list(group))):  # arithmetic: no trial, no work
                    continue
                tried += 1
                self.meter.spend()
                plan = self._move_trial(pod, row, list(group), probe=True)
                if plan is not None:  # the moves as the policy would place them, if it can
                    return self._move_trial(pod, row, list(group), probe=False) or plan
        return None

    def _move_trial(self, pod: PodInfo, row: int, victims: list[Victim], *, probe: bool) -> Plan | None:
        """Take `victims` off `row`, place the pod there and every victim elsewhere; the plan, rolled back.
        `probe`: the victims' new places from the session's cheap placer (a search), else from the policy."""
        cp = self.tx.checkpoint()
        try:
            placed: list[Placement] = []

            def place() -> bool:
                pl = self.session.place_on(demand_for(pod), row)
                if pl is not None:
                    self.tx.place(pod, self.job, pl)
                    placed.append(pl)
                return pl is not None

            moves = self._attempt(victims, place, probe=probe, message="")
            if not moves:
                return None
            cost = (
                len(moves),
                max(v.job.priority for v, _ in moves),
                -min(v.job.created_s for v, _ in moves),
            )
            return Plan(cost, moves, placed[0])
        finally:
            self.tx.rollback_to(cp)

    # -------------------------------------------------------------------------- topology consolidation
    def in_domain(self, scope: Scope, code: int, movable: list[Victim]) -> bool:
        """Make room for the gang (`pods`, `count` of them) in domain `code` of its required level by
        moving some of `movable` (on that domain's nodes) elsewhere (`Moves`): taken off the emptiest nodes
        and the smallest first until the gang fits there by count, then tried (the gang placed inside by the
        cheap placer, the moved pods outside); the plan that holds is applied again with the messages people
        read. Leaves the transaction changed (the caller commits or rolls back); whether it holds."""
        level = scope.required
        assert level is not None
        session, job, tx = self.session, self.job, self.tx
        s, held = session.state, session.ledger
        cp = tx.checkpoint()

        def emptiest_first(v: Victim) -> tuple[int, float, tuple[int, float, str]]:
            pl = held.placement(v.pods[0].uid)
            free = sum(s.node_gpu_row(pl.node)) if pl is not None else 0
            return (-free, v.usage.gpu, expendable(v))

        taken: list[Victim] = []
        for v in sorted(movable, key=emptiest_first)[:MAX_DOMAIN_MOVES]:
            evict(tx, [v], "", label(job))
            taken.append(v)
            fit = GangFit(session, job, self.pods, self.count, scope)
            if all(
                int(cap[code]) >= n for cap, n in zip(fit.capacities(level), fit.counts.values(), strict=True)
            ):
                break
        else:
            return False
        tx.rollback_to(cp)

        def fill() -> bool:
            gang = GangFit(session, job, self.pods, self.count, scope)
            return gang.fill(tx, level, code, probe=True, limit=self.count) >= self.count

        # The moved pods go outside the domain (the hardest to fit first), to places the cheap placer finds.
        outside = Moves(within=~fit.rows(level, code), order=lambda v: -v.usage.gpu)
        moves = self._attempt(taken, fill, probe=True, message="", validator=outside)
        if moves is None:
            return False
        # The plan holds: apply it again with the messages people read (where each pod moves to).
        tx.rollback_to(cp)
        domain = f"{scope.names[level]} {s.domains.name(scope.columns[level], code)}"
        for v, new in moves:
            to = f"{s.node_names[new.node]} GPU {','.join(str(g.slot) for g in new.gpus)}"
            evict(tx, [v], f"moved to {to} to free {domain} for {label(job)} (consolidation)", label(job))
        if GangFit(session, job, self.pods, self.count, scope).fill(tx, level, code, probe=False,
                                                                    limit=self.count) < self.count:  # fmt: skip
            return False
        for v, new in moves:
            tx.reserve(v.pods[0], v.job, new, label(job))
        return True


def expendable(v: Victim) -> tuple[int, float, str]:
    """KAI's victim order: the lowest priority, then the youngest."""
    return (v.job.priority, -v.job.created_s, v.key)
