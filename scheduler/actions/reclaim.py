"""`reclaim`: a queue below its fair share takes resources back from queues over theirs (KAI's rules).

The rules are in `queue_checks`: the reclaiming queue stays within its fair share with the job, and each
victim's queue is over its share (or over its quota while the reclaimer is below its own) before that
victim is taken. Victims are preemptible jobs of other queues, whole gangs or elastic members, chosen by
the victim solver (`solver.py`: cheapest plan, bounded by work). The waiting job is placed in the same transaction as the
evictions, so nothing is evicted unless the job it was evicted for then fits; on a real cluster it is
bound once its victims have terminated (pipelined, see `transaction.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

from scheduler.actions import min_runtime
from scheduler.actions.allocate import admissible
from scheduler.actions.ordering import jobs_in_order
from scheduler.actions.queue_checks import (
    EPS,
    Figures,
    allocatable,
    amount,
    can_reclaim,
    involved,
    quota_of,
    reclaimable,
    victim_candidate,
)
from scheduler.actions.solver import Evictions, VictimSolver
from scheduler.actions.victims import Victim, candidates, victim_order
from scheduler.actions.views import capacity_blocked, label, waiting_jobs
from scheduler.cache.cluster import Cluster
from scheduler.framework.budget import Meter
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction
from scheduler.model.jobs import Job
from scheduler.model.reasons import MAKING_ROOM_HELPS, RECLAIMING_HELPS, Reason
from scheduler.model.resources import Resources
from scheduler.model.types import PodInfo
from scheduler.queues.tree import QueueTree
from scheduler.state.demand import PodDemand, demand_for


class Reclaim:
    name = "reclaim"

    def execute(self, session: Session, cluster: Cluster) -> None:
        meter = session.budget.action()
        # Same queue, same shape, same count: the same answer this cycle.
        failed: dict[tuple[str, PodDemand, int], tuple[Reason, str]] = {}
        for job in jobs_in_order(session, waiting_jobs(session, RECLAIMING_HELPS)):
            pods = capacity_blocked(session, job, RECLAIMING_HELPS)
            verdict = admissible(session, job)
            # A limit is judged once the victims are gone (they may free it, under a shared parent); a job
            # over its limit that reclaim cannot help keeps that reason.
            limited = verdict is not None and verdict[0] is Reason.OVER_LIMIT
            if pods and (verdict is None or limited):
                tell = _silent if limited else partial(_tell, session, pods)
                self._for(session, cluster, meter, failed, job, pods, tell)

    def _for(
        self, session: Session, cluster: Cluster, meter: Meter,
        failed: dict[tuple[str, PodDemand, int], tuple[Reason, str]], job: Job, pods: list[PodInfo],
        tell: Callable[[Reason, str], None],
    ) -> None:  # fmt: skip
        """Reclaim for one job: the rules first, then the victim search; commit, or tell why not."""
        tree = session.tree
        count = session.facts(job).place_now
        request = session.request_of(pods[:count])
        if not involved(request):
            return
        why = can_reclaim(tree, job.queue, request, job.preemptible)
        if why is not None:
            tell(Reason.QUEUE_AT_FAIR_SHARE, why)
            return
        key = (job.queue, demand_for(pods[0]), count)
        if key in failed:
            tell(*failed[key])
            return
        if meter.exhausted:
            tell(Reason.WAITING_FOR_RECLAIM, _head(tree, job.queue, request)
                 + "; the reclaim search budget of this cycle is spent, it is tried again next cycle")  # fmt: skip
            return
        others = [v for v in candidates(session) if v.job.queue != job.queue and v.job.queue in tree.nodes]
        takeable = {q: victim_candidate(tree, job.queue, request, q) for q in {v.job.queue for v in others}}
        runtimes = min_runtime.min_runtimes(session)
        pool, protection = min_runtime.split(
            session,
            [v for v in others if takeable[v.job.queue]],
            lambda v: runtimes.reclaim_s(job.queue, v.job.queue),
        )
        if not pool:
            if protection is not None:
                failed[key] = (
                    Reason.WAITING_FOR_MIN_RUNTIME,
                    protection.describe("reclaim", session.epoch_s),
                )
            else:
                failed[key] = _nobody(session, job, request, bool(others))
            tell(*failed[key])
            return
        tx = Transaction(session, "reclaim")
        message = f"reclaimed for {label(job)} of queue {job.queue}, {_standing(tree, job.queue, request)}"
        rule = partial(_allowed, tree, Figures.of(tree), job, request)
        rules = Evictions(rule, partial(tree.limit_exceeded, job.queue, request))
        search = VictimSolver(session, tx, job, pods, count, rules, message, session.budget.job(meter))
        if search.solve(victim_order(session, pool)) is None:
            tx.rollback()
            failed[key] = _unfit(session, job, request, search.blocked)
            if protection is not None:  # the protected ones may make the room: say when they may go
                failed[key] = (
                    failed[key][0],
                    f"{failed[key][1]}; {protection.describe('reclaim', session.epoch_s)}",
                )
            tell(*failed[key])
            return
        outcome = tx.commit(cluster)
        for p in outcome.bound:
            session.verdicts.clear(p)


def _silent(reason: Reason, message: str) -> None:
    """A job over its limit keeps that reason when reclaim cannot help it."""


def _allowed(
    tree: QueueTree, figures: Figures, job: Job, request: Resources, victims: list[Victim]
) -> str | None:
    return reclaimable(tree, figures, job.queue, request, job.preemptible,
                       [(v.job.queue, v.usage) for v in victims])  # fmt: skip


def _standing(tree: QueueTree, queue: str, request: Resources) -> str:
    """What entitles a reclaiming queue to take back: its quota while it stays within it with the job
    (the figure its owners set), else its fair share (which grows with what the queue asks, so it is
    smaller while the queue's pods are still arriving)."""
    r = involved(request)[0]
    node = tree.nodes[queue]
    held, quota = node.allocated.get(r), quota_of(node, r)
    if not math.isinf(quota) and held + request.get(r) <= quota + EPS:
        return f"below its quota (it holds {amount(r, held)} of {amount(r, quota)})"
    return f"below its fair share (it holds {amount(r, held)} of {amount(r, node.fair_share.get(r))})"


def _head(tree: QueueTree, queue: str, request: Resources) -> str:
    r = involved(request)[0]
    node = tree.nodes[queue]
    return (
        f"queue {queue} is below its fair share ({amount(r, node.allocated.get(r))} of "
        f"{amount(r, node.fair_share.get(r))})"
    )


def _nobody(session: Session, job: Job, request: Resources, others: bool) -> tuple[Reason, str]:
    """No queue's work may be taken: say which rule, or that there is none to take."""
    head = _head(session.tree, job.queue, request)
    if not others:
        return Reason.WAITING_FOR_CAPACITY, f"{head}, but no other queue runs preemptible work"
    return (
        Reason.WAITING_FOR_CAPACITY,
        f"{head}, but no other queue is over its fair share (or over its quota while queue {job.queue} "
        "is below its own) to reclaim from",
    )


def _unfit(session: Session, job: Job, request: Resources, blocked: str | None) -> tuple[Reason, str]:
    head = _head(session.tree, job.queue, request)
    if blocked is not None:
        return Reason.RECLAIM_BLOCKED, f"{head}; the victims that would make room may not be taken: {blocked}"
    r = involved(request)[0]
    donor, surplus = _most_over_share(session, job.queue, r)
    n = min(request.get(r), surplus) if donor is not None else request.get(r)
    source = f" from queue {donor}" if donor is not None else ""
    return (
        Reason.WAITING_FOR_RECLAIM,
        f"{head}; waiting for reclaim of {amount(r, n)}{source} (no set of its preemptible pods frees a "
        "place that fits yet)",
    )


def _tell(session: Session, pods: list[PodInfo], reason: Reason, msg: str) -> None:
    """Set the reclaim verdict, keeping a placement reason as the headline's context."""
    for p in pods:
        wait = session.verdicts.wait(p)
        if wait is None or wait not in MAKING_ROOM_HELPS:
            session.set_reason(p, reason, msg)
        elif reason is Reason.WAITING_FOR_CAPACITY:  # nothing to reclaim: the placement's reason leads
            session.verdicts.note(p, msg)
        else:
            session.verdicts.retell(p, reason, msg)


def _most_over_share(session: Session, queue: str, r: str) -> tuple[str | None, float]:
    """The leaf queue furthest over what it may hold of `r`, and by how much."""
    tree = session.tree
    best: tuple[str | None, float] = (None, 0.0)
    for name, node in tree.nodes.items():
        if not node.is_leaf or name == queue:
            continue
        over = node.allocated.get(r) - min(
            allocatable(node, r), max(quota_of(node, r), node.fair_share.get(r))
        )
        if over > best[1] + 1e-9:
            best = (name, over)
    return best
