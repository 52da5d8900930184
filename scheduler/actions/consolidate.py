"""`consolidate`: place a pod blocked only by fragmentation by moving preemptible pods out of its way.

"Only by fragmentation": the nodes that could host the pod have enough free GPU in total, in pieces too
small. On one such node at a time, movable pods (preemptible, single pods, holding GPUs) are taken off in
the order that frees a GPU soonest, until the waiting pod fits there; then every one of them must get a
new place elsewhere in the cluster, or the plan is dropped. The cheapest plan (fewest moves) is applied:
evictions, the waiting pod's placement and the moved pods' new places in one transaction. The new places
are reservations (see `scheduler/reservations.py`): the recreated pods are bound there next cycle.
No queue loses anything: a moved pod keeps its resources, in a new place.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from scheduler.actions.allocate import admissible
from scheduler.actions.domain_consolidation import DomainConsolidation
from scheduler.actions.ordering import jobs_in_order
from scheduler.actions.victims import Victim, candidates, evict
from scheduler.actions.views import capacity_blocked, label, need_now, static_rows, waiting_jobs
from scheduler.api.keys import MILLI_PER_GPU
from scheduler.cluster import Cluster
from scheduler.jobs import Job
from scheduler.ledger import Ledger
from scheduler.memo import MemoKey
from scheduler.model import Placement, PodInfo
from scheduler.placement.filters import gpu_need
from scheduler.reasons import Reason
from scheduler.session import Session
from scheduler.state.demand import PodDemand, demand_for
from scheduler.transaction import Transaction

MAX_MOVES = 8  # per waiting pod
MAX_ROWS = 16  # nodes tried per waiting pod, those with the most free GPU first
ACTION_BUDGET_S = 0.25
PLAN_BUDGET_S = 0.05  # per waiting pod


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
        self.futile: dict[PodDemand, int] = {}
        self.domains = DomainConsolidation()

    def execute(self, session: Session, cluster: Cluster) -> None:
        start = time.perf_counter()
        failed: set[PodDemand] = set()
        for job in jobs_in_order(session, waiting_jobs(session)):
            pods = capacity_blocked(session, job)
            if not pods or admissible(session, job) is not None:
                continue
            if job.topology is not None:  # room is made inside one topology domain (domain_consolidation.py)
                self.domains.run(session, cluster, job, pods, need_now(session, job))
                continue
            count = need_now(session, job)
            d = demand_for(pods[0])
            free = fragmented_free(session, d, count)
            if free is None:
                continue  # short of capacity, not fragmented: reclaim or preempt may help
            layout = session.memo.get(LAYOUT, session.ledger.fingerprint)  # hashed only when needed
            futile = self.futile.get(d) == layout  # failed before on this very layout
            if d in failed or futile or time.perf_counter() - start > ACTION_BUDGET_S:
                _explain(session, pods, d, free)
                continue
            if not self._plan_job(session, cluster, job, pods, count):
                failed.add(d)
                _explain(session, pods, d, free)

    def _plan_job(
        self, session: Session, cluster: Cluster, job: Job, pods: list[PodInfo], count: int
    ) -> bool:
        """Place `count` of the job's pods, making room where needed; commit, or roll back and say so."""
        tx = Transaction(session, "consolidate")
        placed = 0
        for pod in pods:
            if placed == count:
                break
            pl = session.place_one(demand_for(pod))
            if pl is not None:
                tx.place(pod, job, pl)
                placed += 1
            elif _make_room(session, tx, job, pod):
                placed += 1
            else:
                break
        if placed < count:
            tx.rollback()
            if placed == 0:
                if len(self.futile) > 1024:  # shapes of long gone pods
                    self.futile.clear()
                self.futile[demand_for(pods[0])] = session.memo.get(LAYOUT, session.ledger.fingerprint)
            return False
        outcome = tx.commit(cluster)
        for p in outcome.bound:
            session.reasons.pop(p.uid, None)
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
    held = session.ledger.pods
    return [
        v for v in candidates(session)
        if not v.job.is_gang and v.job.key != job.key and held[v.pods[0].uid].placement.gpus
    ]  # fmt: skip


def _node_order(session: Session, row: int, victims: list[Victim], need_milli: int) -> list[Victim]:
    """Victims on `row`, those on GPUs that become free with the fewest moves first."""
    s, held = session.state, session.ledger
    on_gpu: dict[int, list[Victim]] = {}
    movable_milli: dict[int, int] = {}
    for v in victims:
        for share in _held(held, v).gpus:
            on_gpu.setdefault(share.slot, []).append(v)
            movable_milli[share.slot] = movable_milli.get(share.slot, 0) + share.milli

    def key(v: Victim) -> tuple[int, int, int, int, float]:
        slot = _held(held, v).gpus[0].slot
        used = MILLI_PER_GPU - int(s.free_milli[row, slot])
        stuck = used - movable_milli[slot]  # held by pods that cannot move
        blocked = 1 if stuck > MILLI_PER_GPU - need_milli else 0
        return (blocked, len(on_gpu[slot]), used, v.job.priority, -v.job.created_s)

    return sorted(victims, key=key)


def _make_room(session: Session, tx: Transaction, job: Job, pod: PodInfo) -> bool:
    s = session.state
    d = demand_for(pod)
    need_milli = max(d.gpu_milli, 1)
    deadline = time.perf_counter() + PLAN_BUDGET_S
    by_node: dict[int, list[Victim]] = {}
    for v in _movable(session, job):
        by_node.setdefault(_held(session.ledger, v).node, []).append(v)
    rows = static_rows(s, d)
    need_milli_at, _ = gpu_need(s, d)
    order = sorted(
        (r for r in by_node if bool(rows[r]) and _could_fit(session, r, by_node[r], d, need_milli_at)),
        key=lambda r: (-sum(s.node_gpu_row(r)), r),
    )[:MAX_ROWS]
    cp = tx.checkpoint()
    best: Plan | None = None
    for row in order:
        if time.perf_counter() > deadline or (best is not None and best.cost[0] == 1):
            break
        plan = _plan_on(session, tx, job, pod, row, _node_order(session, row, by_node[row], need_milli))
        tx.rollback_to(cp)
        if plan is not None and (best is None or plan.cost < best.cost):
            best = plan
    if best is None:
        return False
    for v, new in best.moves:
        to = f"{s.node_names[new.node]} GPU {','.join(str(g.slot) for g in new.gpus)}"
        evict(tx, v, f"moved to {to} to make room for {label(job)} (consolidation)", label(job))
    tx.place(pod, job, best.placement, "placed after consolidation")
    for v, new in best.moves:
        tx.reserve(v.pods[0], v.job, new, label(job))
    return True


def _could_fit(session: Session, row: int, victims: list[Victim], d: PodDemand, need_milli_at: Any) -> bool:
    """Whether moving every movable pod off `row` would leave room for the pod (cheap upper bound)."""
    s, held = session.state, session.ledger
    freed: dict[int, int] = {}
    cpu, mem = int(s.free_cpu[row]), int(s.free_mem[row])
    for v in victims:
        pl = _held(held, v)
        cpu, mem = cpu + pl.cpu_milli, mem + pl.memory_mib
        for share in pl.gpus:
            freed[share.slot] = freed.get(share.slot, 0) + share.milli
    need = need_milli_at[row]
    gpus = sum(
        1 for j in range(s.max_gpus)
        if bool(s.present[row, j]) and bool(s.healthy[row, j])
        and int(s.free_milli[row, j]) + freed.get(j, 0) >= int(need[j])
    )  # fmt: skip
    return gpus >= d.num_gpus and cpu >= d.cpu_milli and mem >= d.memory_mib


def _plan_on(
    session: Session, tx: Transaction, job: Job, pod: PodInfo, row: int, victims: list[Victim]
) -> Plan | None:
    """Take victims off `row` until `pod` fits there, then re-place every one of them; leaves the
    transaction changed (the caller rolls back)."""
    d = demand_for(pod)
    taken: list[Victim] = []
    for v in victims[:MAX_MOVES]:
        evict(tx, v, "", label(job))
        taken.append(v)
        mask, _ = session.feasible(d)
        if bool(mask[row]):
            break
    else:
        return None
    placement = session.place_one(d)
    if placement is None:
        return None
    tx.place(pod, job, placement)
    moves: list[tuple[Victim, Placement]] = []
    for v in sorted(taken, key=lambda v: -v.usage.gpu):  # biggest first: they are the hardest to fit
        new = session.place_one(demand_for(v.pods[0]))
        if new is None:
            return None
        tx.reserve(v.pods[0], v.job, new, label(job))
        moves.append((v, new))
    cost = (len(moves), max(v.job.priority for v, _ in moves), -min(v.job.created_s for v, _ in moves))
    return Plan(cost, moves, placement)


def _held(ledger: Ledger, v: Victim) -> Placement:
    """Where a movable victim (a single pod, running) is now."""
    pl = ledger.placement(v.pods[0].uid)
    assert pl is not None
    return pl


def _explain(session: Session, pods: list[PodInfo], d: PodDemand, free: float) -> None:
    msg = (
        f"fragmentation: {free:g} GPUs are free on nodes that match, but in pieces: no node has room for "
        f"{d.describe()}; consolidation found no preemptible pods it could move (at most {MAX_MOVES}, "
        "each to a new place planned in advance)"
    )
    for p in pods:
        session.set_reason(p, Reason.FRAGMENTED, msg)
