"""Choosing whom to evict so that a waiting job fits (shared by `reclaim` and `preempt`).

Victims are units of running preemptible jobs: a gang whole (never in part), or one member of an elastic
gang above its minMember. They are ordered as KAI Scheduler orders its victims: the queue most over its
share first (queues interleaved as victims are taken), inside a queue the lowest priority, then elastic
extras, then the youngest. A plan costs its evicted pods, then how far down that order its last victim
is: the search returns the cheapest plan it finds (the cheapest there is when it completes within its
bounds), and never one with a victim it could leave out.

The search is bounded by work (`scheduler/budget.py`): each trial (a candidate set of victims evicted and
the job placed, then rolled back) spends one unit; sets checked by arithmetic alone are bounded apart
(`MAX_CHECKS`), so the same inputs always give the same plan.

- a job of one pod: per node, a depth-first search over the node's victims in order with backtracking,
  pruned by the best cost found and by the queue rules (a set a rule refuses only gets worse with more
  victims). Whether the pod fits once a set is gone is plain arithmetic on that node's row: nothing is
  evicted or scored until the plan is chosen;
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

from scheduler.actions.topology_victims import domain_pools, topology_rows
from scheduler.actions.views import label, place_members, running_now, static_rows
from scheduler.api.keys import MILLI_PER_GPU
from scheduler.budget import Meter
from scheduler.jobs import Job
from scheduler.memo import MemoKey
from scheduler.model import Placement, PodInfo
from scheduler.placement.filters import gpu_need
from scheduler.resources import Resources, placement_usage
from scheduler.session import Session
from scheduler.state.demand import PodDemand, demand_for
from scheduler.transaction import Transaction

MAX_VICTIM_UNITS = 32  # per waiting job: beyond this many victims, the plan is not worth the disruption
MAX_CHECKS = 4096  # per waiting job: sets of victims checked by arithmetic (trials spend the budget)


@dataclass(frozen=True)
class Victim:
    job: Job
    pods: tuple[PodInfo, ...]
    usage: Resources
    nodes: frozenset[int]
    elastic: bool = False  # one member of an elastic gang above its minMember (not the whole gang)
    order: int = 0  # an elastic member's turn inside its gang (0 goes first: the youngest, the last named)

    def sort_key(self) -> tuple[int, int, float, int, int, str]:
        return (
            self.job.priority,
            0 if self.elastic else 1,
            -self.job.created_s,
            self.order,
            len(self.pods),
            self.key,
        )

    @property
    def key(self) -> str:
        return f"{self.job.key}#{self.pods[0].uid}" if self.elastic else self.job.key


# The running preemptible jobs as the first action that asked found them (see `candidates`).
VICTIMS: MemoKey[list[Victim]] = MemoKey("victims")


# The same list, less the units evicted since, as of a state version (asked again and again while
# nothing is evicted).
LIVE_VICTIMS: MemoKey[tuple[int, int, list[Victim]]] = MemoKey("live_victims")


def candidates(session: Session) -> list[Victim]:
    """Victim units of running preemptible jobs, most expendable first (inside a queue).

    Computed once per cycle; units evicted since then are left out. Pods placed later in the cycle are
    not candidates in it (evicting what was just bound would only churn)."""
    held = session.ledger.pods
    everyone = session.memo.get(VICTIMS, lambda: _running_preemptible(session))
    key = (session.state.version, len(held))
    live = session.memo.peek(LIVE_VICTIMS)
    if live is None or live[:2] != key:
        live = (*key, [v for v in everyone if all(p.uid in held for p in v.pods)])
        session.memo.put(LIVE_VICTIMS, live)
    return live[2]


def _unit(session: Session, job: Job, pods: list[PodInfo], *, elastic: bool, order: int = 0) -> Victim:
    held = session.ledger.pods
    places = [held[p.uid].placement for p in pods]
    usage = (
        placement_usage(places[0])
        if len(places) == 1
        else Resources(
            gpu=sum(g.milli for pl in places for g in pl.gpus) / MILLI_PER_GPU,
            cpu=float(sum(pl.cpu_milli for pl in places)),
            memory=float(sum(pl.memory_mib for pl in places)),
        )
    )
    nodes = frozenset(pl.node for pl in places)
    return Victim(job, tuple(pods), usage, nodes, elastic, order)


def _running_preemptible(session: Session) -> list[Victim]:
    out: list[Victim] = []
    for job in session.jobs:
        if not job.preemptible:
            continue
        pods = running_now(session, job)
        if not pods:
            continue
        extra = len(pods) + job.succeeded - job.min_member if job.is_gang else 0
        if extra > 0:  # elastic: members above minMember may go one by one, the youngest first
            newest = sorted(pods, key=lambda p: (p.created_s, _natural(p.name)), reverse=True)
            out.extend(_unit(session, job, [p], elastic=True, order=i) for i, p in enumerate(newest[:extra]))
        out.append(_unit(session, job, pods, elastic=False))
    out.sort(key=Victim.sort_key)
    return out


def _natural(name: str) -> tuple[str, int]:
    """A pod name in the order its controller made it: worker-10 after worker-9."""
    stem, _, index = name.rpartition("-")
    return (stem, int(index)) if index.isdigit() else (name, -1)


def victim_order(session: Session, victims: list[Victim]) -> list[Victim]:
    """KAI's victim order across queues: repeatedly the next victim of the queue most over its share,
    counting what was taken from it so far (so queues are interleaved as they come down)."""
    by_queue: dict[str, list[Victim]] = {}
    for v in victims:
        by_queue.setdefault(v.job.queue, []).append(v)
    if len(by_queue) <= 1:
        return list(victims)
    tree = session.tree
    taken = {q: 0.0 for q in by_queue}

    def share(q: str) -> tuple[float, int, str, str]:
        """The queue served last goes first: most over its share, then the lower priority, then the newer."""
        node = tree.nodes.get(q)
        if node is None:
            return (float("inf"), 0, "", q)
        fair = node.fair_share.gpu
        used = node.allocated.gpu - taken[q]
        ratio = used / fair if fair > 1e-9 else (float("inf") if used > 1e-9 else 0.0)
        return (ratio, -node.spec.priority, node.created, q)

    out: list[Victim] = []
    while by_queue:
        q = max(by_queue, key=share)
        v = by_queue[q].pop(0)
        out.append(v)
        taken[q] += v.usage.gpu
        if not by_queue[q]:
            del by_queue[q]
    return out


def evict(tx: Transaction, victims: list[Victim], message: str, beneficiary: str) -> None:
    """Evict the victims' pods (a pod shared by two units, an elastic member and its whole gang, once)."""
    seen: set[str] = set()
    for v in victims:
        for p in v.pods:
            if p.uid not in seen:
                seen.add(p.uid)
                tx.evict(p, message, beneficiary)


def pod_count(victims: list[Victim]) -> int:
    return len({p.uid for v in victims for p in v.pods})


Cost = tuple[int, tuple[int, ...]]
Rule = Callable[[list[Victim]], str | None]  # None: the set is allowed; else the rule that refuses it


@dataclass
class RowFit:
    """One node's free capacity, to tell by arithmetic whether a pod fits once some victims are gone."""

    ok: bool
    free_milli: list[int]
    free_mib: list[int]
    usable: list[bool]
    need_milli: list[int]
    need_mib: list[int]
    cpu: int
    mem: int

    @classmethod
    def of(cls, session: Session, d: PodDemand, row: int, static: Any) -> RowFit:
        """Row `row` now; `static`: bool[N] nodes that could host the pod if they were empty."""
        s, xp = session.state, session.xp
        exclude = session.excluded(d)
        ok = bool(static[row]) and (exclude is None or not bool(exclude[row]))
        milli, mib = gpu_need(s.take_rows([row]), d)
        free_mib = xp.minimum(s.free_mib[row, :], s.report_free_mib[row, :])
        return cls(
            ok=ok,
            free_milli=[int(x) for x in s.host(s.free_milli[row, :])],
            free_mib=[int(x) for x in s.host(free_mib)],
            usable=[bool(x) for x in s.host(s.present[row, :] & s.healthy[row, :])],
            need_milli=[int(x) for x in s.host(milli[0, :])],
            need_mib=[int(x) for x in s.host(mib[0, :])],
            cpu=int(s.free_cpu[row]),
            mem=int(s.free_mem[row]),
        )

    def fits(self, d: PodDemand, freed: dict[int, tuple[int, int]], cpu: int, mem: int) -> bool:
        if not self.ok or self.cpu + cpu < d.cpu_milli or self.mem + mem < d.memory_mib:
            return False
        if not d.uses_gpu:
            return True
        gpus = 0
        for j, usable in enumerate(self.usable):
            if not usable:
                continue
            milli, mib = freed.get(j, (0, 0))
            if (
                self.free_milli[j] + milli >= self.need_milli[j]
                and self.free_mib[j] + mib >= self.need_mib[j]
            ):
                gpus += 1
        return gpus >= d.num_gpus


@dataclass
class VictimSearch:
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

        def freed_on(row: int, victims: list[Victim]) -> tuple[dict[int, tuple[int, int]], int, int]:
            freed: dict[int, tuple[int, int]] = {}
            cpu = mem = 0
            seen: set[str] = set()
            for v in victims:
                for p in v.pods:
                    pl = held[p.uid].placement
                    if pl.node != row or p.uid in seen:
                        continue
                    seen.add(p.uid)
                    cpu, mem = cpu + pl.cpu_milli, mem + pl.memory_mib
                    for g in pl.gpus:
                        m, b = freed.get(g.slot, (0, 0))
                        freed[g.slot] = (m + g.milli, b + g.mib)
            return freed, cpu, mem

        for row in sorted(by_row):
            if self.meter.exhausted or self._checks >= MAX_CHECKS:
                break
            fit = RowFit.of(self.session, d, row, static)
            units = by_row[row]

            def fits(victims: list[Victim], fit: RowFit = fit, row: int = row) -> bool:
                self._checks += 1  # arithmetic, no trial: bounded apart from the budget
                return fit.fits(d, *freed_on(row, victims))

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
                if rest and fit.fits(d, *freed_on(row, rest)) and self._rule(rest) is None:
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


def placement_of(session: Session, pod: PodInfo) -> Placement:
    pl = session.ledger.placement(pod.uid)
    assert pl is not None
    return pl
