"""`consolidate`: place a pod blocked only by fragmentation by moving preemptible pods out of its way.

"Only by fragmentation": the nodes that could host the pod have enough free GPU in total, in pieces too
small. On one such node at a time, the plan takes the fewest movable pods (preemptible single pods holding
GPUs, for which some GPU has room now) whose going makes room for the pod there, by plain arithmetic on the node's row, trying smaller sets
first (so a plan never moves a pod it does not need to); then every one of them must get a new place
elsewhere (another node, or another GPU of its own), never the place it has now (that would restart it for
nothing), or the set is dropped. The cheapest plan over the nodes tried (fewest moves, then the lowest
priority, then the youngest, as KAI orders its victims) is applied:
evictions, the waiting pod's placement and the moved pods' new places in one transaction. The new places
are reservations (see `scheduler/cache/reservations.py`): the recreated pods are bound there next cycle, and the
waiting pod itself once the moved pods have terminated (pipelined). No queue loses anything: a moved pod
keeps its resources, in a new place. Searches are bounded by work (`scheduler/framework/budget.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any

from scheduler.actions.allocate import admissible
from scheduler.actions.domain_consolidation import DomainConsolidation
from scheduler.actions.ordering import jobs_in_order
from scheduler.actions.row_fit import RowFit, freed_on
from scheduler.actions.victims import Victim, candidates, evict
from scheduler.actions.views import capacity_blocked, label, static_rows, waiting_jobs
from scheduler.api.keys import MILLI_PER_GPU
from scheduler.cache.cluster import Cluster
from scheduler.cache.ledger import Ledger
from scheduler.framework.budget import Meter
from scheduler.framework.memo import MemoKey
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction
from scheduler.model.constraints import PodScope
from scheduler.model.jobs import Job
from scheduler.model.reasons import Reason
from scheduler.model.types import Placement, PodInfo
from scheduler.placement.filters import gpu_need
from scheduler.state.demand import PodDemand, demand_for

MAX_MOVES = 8  # per waiting pod
MAX_ROWS = 16  # nodes tried per waiting pod, those with the most free GPU first
MAX_SETS_PER_ROW = 8  # sets of the smallest size tried on one node before the next node


@dataclass
class Plan:
    cost: tuple[int, int, float]
    moves: list[tuple[Victim, Placement]]  # victim, its new place
    placement: Placement  # the waiting pod's


# Who held what where when consolidation first looked this cycle (see `Consolidate.futile`).
LAYOUT: MemoKey[int] = MemoKey("layout")


class Consolidate:
    name = "consolidate"

    def __init__(self) -> None:
        # Pod shapes no plan was found for, with the fingerprint of the layout tried: a plan that failed
        # on a layout fails on it again, so it is not searched for until something moved.
        self.futile: dict[tuple[PodDemand, PodScope | None], int] = {}
        self.domains = DomainConsolidation()

    def execute(self, session: Session, cluster: Cluster) -> None:
        meter = session.budget.action()
        failed: set[tuple[PodDemand, PodScope | None]] = set()
        for job in jobs_in_order(session, waiting_jobs(session)):
            pods = capacity_blocked(session, job)
            if not pods or admissible(session, job) is not None:
                continue
            count = session.facts(job).place_now
            if job.topology is not None:  # room is made inside one topology domain (domain_consolidation.py)
                if not meter.exhausted:
                    self.domains.run(session, cluster, job, pods, count, session.budget.job(meter))
                continue
            d = demand_for(pods[0])
            free = fragmented_free(session, d, count)
            if free is None:
                continue  # short of capacity, not fragmented: reclaim or preempt may help
            layout = session.memo.get(LAYOUT, session.ledger.fingerprint)  # hashed only when needed
            futile = self.futile.get((d, d.scope)) == layout  # failed before on this very layout
            if (d, d.scope) in failed or futile or meter.exhausted:
                _explain(session, pods, d, free)
                continue
            if not self._plan_job(session, cluster, job, pods, count, session.budget.job(meter)):
                failed.add((d, d.scope))
                _explain(session, pods, d, free)

    def _plan_job(
        self, session: Session, cluster: Cluster, job: Job, pods: list[PodInfo], count: int, meter: Meter
    ) -> bool:
        """Place `count` of the job's pods, making room where needed; commit, or roll back and say so."""
        tx = Transaction(session, "consolidate")
        placed = 0
        for pod in pods:
            if placed == count:
                break
            pl = session.place(demand_for(pod))
            if pl is not None:
                tx.place(pod, job, pl)
                placed += 1
            elif _make_room(session, tx, job, pod, meter):
                placed += 1
            else:
                break
        if placed < count:
            tx.rollback()
            if placed == 0:
                if len(self.futile) > 1024:  # shapes of long gone pods
                    self.futile.clear()
                first = demand_for(pods[0])
                self.futile[(first, first.scope)] = session.memo.get(LAYOUT, session.ledger.fingerprint)
            return False
        outcome = tx.commit(cluster)
        for p in outcome.bound:
            session.verdicts.clear(p)
        return True


def fragmented_free(session: Session, d: PodDemand, count: int) -> float | None:
    """Free GPUs (in total, on nodes that could host the pod) when they would suffice, else None."""
    if not d.uses_gpu:
        return None
    xp, s = session.xp, session.state
    rows = static_rows(s, d) & (s.free_cpu >= d.cpu_milli) & (s.free_mem >= d.memory_mib)
    need_milli, _ = gpu_need(s, d)
    usable = s.present & s.healthy & rows[:, None]
    free = int(xp.sum(xp.where(usable, xp.astype(s.free_milli, xp.int64), xp.zeros_like(need_milli))))
    each = int(xp.min(xp.where(usable, need_milli, xp.full(need_milli.shape, MILLI_PER_GPU, dtype=xp.int64))))
    if free < count * d.num_gpus * each:
        return None
    return free / MILLI_PER_GPU


def _movable(session: Session, job: Job) -> list[Victim]:
    """Preemptible pods that move alone, holding GPUs: a job of one pod (a PodGroup of one included) or a
    member of an elastic gang above its minMember. A gang is never moved (docs/differences-from-kai.md),
    nor a pod no controller owns: a move is an eviction its controller undoes, and a bare pod would be lost."""
    held = session.ledger.pods
    return [
        v for v in candidates(session)
        if len(v.pods) == 1 and v.job.key != job.key and v.pods[0].controlled
        and held[v.pods[0].uid].placement.gpus
    ]  # fmt: skip


def _held(ledger: Ledger, v: Victim) -> Placement:
    """Where a movable victim (a single pod, running) is now."""
    pl = ledger.placement(v.pods[0].uid)
    assert pl is not None
    return pl


def _make_room(session: Session, tx: Transaction, job: Job, pod: PodInfo, meter: Meter) -> bool:
    s, ledger = session.state, session.ledger
    d = demand_for(pod)
    by_node: dict[int, list[Victim]] = {}
    elsewhere: dict[
        tuple[PodDemand, PodScope | None], Any
    ] = {}  # per demand, bool[N]: nodes with room for it now (another GPU)
    for v in _movable(session, job):
        dv, row = demand_for(v.pods[0]), _held(ledger, v).node
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
        if meter.exhausted:
            break
        # The pods most expendable first: lowest priority, then the youngest.
        units = sorted(by_node[row], key=lambda v: (v.job.priority, -v.job.created_s, v.key))[:MAX_MOVES]
        plan = _plan_on(session, tx, job, pod, row, fits[row], units, meter, best)
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


def _plan_on(
    session: Session, tx: Transaction, job: Job, pod: PodInfo, row: int, fit: RowFit,
    units: list[Victim], meter: Meter, best: Plan | None,
) -> Plan | None:  # fmt: skip
    """The cheapest plan that makes room on `row`: the smallest sets of `units` whose going lets the pod
    fit there (arithmetic), each tried for new places of its pods (a trial, rolled back)."""
    d = demand_for(pod)
    ledger = session.ledger
    for size in range(1, len(units) + 1):
        if best is not None and size > best.cost[0]:
            return None
        tried = 0
        for group in combinations(units, size):  # the most expendable sets of this size first
            if meter.exhausted or tried >= MAX_SETS_PER_ROW:
                return None
            if not fit.fits(d, freed_on(ledger.pods, row, list(group))):  # arithmetic: no trial, no work
                continue
            tried += 1
            meter.spend()
            plan = _trial(session, tx, job, pod, row, list(group), probe=True)
            if plan is not None:  # the moves as the policy would place them, if it can
                return _trial(session, tx, job, pod, row, list(group), probe=False) or plan
    return None


def _trial(
    session: Session, tx: Transaction, job: Job, pod: PodInfo, row: int, victims: list[Victim], *, probe: bool
) -> Plan | None:
    """Take `victims` off `row`, place the pod there and every victim elsewhere; the plan, rolled back.
    `probe`: the victims' new places from the session's cheap placer (a search), else from the policy."""
    cp = tx.checkpoint()
    try:
        old = {v.key: _held(session.ledger, v) for v in victims}
        evict(tx, victims, "", label(job))
        placement = session.place_on(demand_for(pod), row)
        if placement is None:
            return None
        tx.place(pod, job, placement)
        moves: list[tuple[Victim, Placement]] = []
        for v in sorted(victims, key=lambda v: (-v.usage.gpu, v.key)):  # biggest first: hardest to fit
            dv = demand_for(v.pods[0])
            new = session.probe_place(dv) if probe else session.place(dv)
            if new is None or new == old[v.key]:
                return None  # no place for it, or only the one it has (moving it would gain nothing)
            tx.reserve(v.pods[0], v.job, new, label(job))
            moves.append((v, new))
        cost = (len(moves), max(v.job.priority for v, _ in moves), -min(v.job.created_s for v, _ in moves))
        return Plan(cost, moves, placement)
    finally:
        tx.rollback_to(cp)


def _explain(session: Session, pods: list[PodInfo], d: PodDemand, free: float) -> None:
    msg = (
        f"fragmentation: {free:g} GPUs are free on nodes that match, but in pieces: no node has room for "
        f"{d.describe()}; consolidation found no preemptible pods it could move (at most {MAX_MOVES}, "
        "each to a new place planned in advance)"
    )
    for p in pods:
        session.set_reason(p, Reason.FRAGMENTED, msg)
