"""`reclaim`: a queue below its fair share (or quota) takes resources back from queues above theirs.

Victims are preemptible jobs of other queues, evicted whole, never pushing a victim queue below its
quota (see `queue_checks`). The waiting job is placed in the same transaction as the evictions, so
nothing is evicted unless the job it was evicted for then fits.
"""

from __future__ import annotations

import time
from functools import partial

from scheduler.actions.allocate import admissible
from scheduler.actions.ordering import jobs_in_order
from scheduler.actions.queue_checks import amount, contended, may_reclaim, quota_of, reclaimer_ok, side
from scheduler.actions.victims import Victim, VictimSearch, candidates
from scheduler.actions.views import capacity_blocked, label, need_now, request_of, waiting_jobs
from scheduler.cluster import Cluster
from scheduler.jobs import Job
from scheduler.model import PodInfo
from scheduler.queues.tree import QueueTree
from scheduler.reasons import MAKING_ROOM_HELPS, Reason
from scheduler.resources import Resources
from scheduler.session import Session
from scheduler.state.demand import PodDemand, demand_for
from scheduler.transaction import Transaction

ACTION_BUDGET_S = 0.25


class Reclaim:
    name = "reclaim"

    def execute(self, session: Session, cluster: Cluster) -> None:
        start = time.perf_counter()
        failed: set[tuple[str, PodDemand, int]] = set()  # same queue, same shape: same answer this cycle
        tree = session.tree
        for job in jobs_in_order(session, waiting_jobs(session)):
            pods = capacity_blocked(session, job)
            if not pods or admissible(session, job) is not None:
                continue
            count = need_now(session, job)
            request = request_of(pods[:count])
            names = contended(request)
            if not names:
                continue
            mine = tree.ancestors(job.queue)
            if not any(reclaimer_ok(mine[:1], request, names, mode) for mode in ("fair", "quota")):
                _explain(session, job, pods, request, at_share=True)
                continue
            key = (job.queue, demand_for(pods[0]), count)
            if key in failed or time.perf_counter() - start > ACTION_BUDGET_S:
                _explain(session, job, pods, request, at_share=False)
                continue
            pool = [v for v in candidates(session) if v.job.queue != job.queue and v.job.queue in tree.nodes]
            tx = Transaction(session, "reclaim")
            node = tree.nodes[job.queue]
            r = names[0]
            why = (
                f"reclaimed for {label(job)} of queue {job.queue} "
                f"({amount(r, node.allocated.get(r))} of {amount(r, node.fair_share.get(r))} fair share)"
            )
            allowed = partial(_allowed, tree, job.queue, request)
            search = VictimSearch(session, tx, job, pods, count, allowed, why)
            if search.run(pool) is None:
                tx.rollback()
                failed.add(key)
                _explain(session, job, pods, request, at_share=False)
                continue
            outcome = tx.commit(cluster)
            for p in outcome.bound:
                session.reasons.pop(p.uid, None)


def _allowed(tree: QueueTree, queue: str, request: Resources, v: Victim) -> bool:
    return may_reclaim(tree, queue, request, v.job.queue, v.usage)


def _explain(session: Session, job: Job, pods: list[PodInfo], request: Resources, *, at_share: bool) -> None:
    tree = session.tree
    r = contended(request)[0]
    node = tree.nodes[job.queue]
    alloc, fair = node.allocated.get(r), node.fair_share.get(r)
    if at_share:
        reason = Reason.QUEUE_AT_FAIR_SHARE
        msg = (
            f"queue {job.queue} is at its fair share ({amount(r, alloc)} of {amount(r, fair)} allocated, "
            f"quota {amount(r, quota_of(node, r))}); {amount(r, request.get(r))} more waits for idle capacity"
        )
    else:
        reason = Reason.WAITING_FOR_RECLAIM
        donor, surplus = _most_over_share(session, job.queue, r)
        head = f"queue {job.queue} is below its fair share ({amount(r, alloc)} of {amount(r, fair)})"
        if donor is None:
            reason, msg = (
                Reason.WAITING_FOR_CAPACITY,
                f"{head}, but no other queue is over its share to reclaim from",
            )
        else:
            n = min(request.get(r), surplus)
            msg = (
                f"{head}; waiting for reclaim of {amount(r, n)} from queue {donor} "
                f"(no set of its preemptible pods frees a place that fits yet)"
            )
    for p in pods:
        prev = session.reasons.get(p.uid)
        if prev is None or prev.reason.wait not in MAKING_ROOM_HELPS:
            session.set_reason(p, reason, msg)
        elif (
            reason is Reason.WAITING_FOR_CAPACITY
        ):  # nothing to reclaim: the placement's reason stays the headline
            session.set_reason(p, prev.reason, f"{prev.message}; {msg}")
        else:
            session.set_reason(p, reason, f"{prev.message}; {msg}")


def _most_over_share(session: Session, queue: str, r: str) -> tuple[str | None, float]:
    tree = session.tree
    best: tuple[str | None, float] = (None, 0.0)
    for name, node in tree.nodes.items():
        if not node.is_leaf or name == queue:
            continue
        over = min(n.allocated.get(r) - max(n.fair_share.get(r), min(quota_of(n, r), n.requested.get(r)))
                   for n in side(tree, name, queue))  # fmt: skip
        if over > best[1] + 1e-9:
            best = (name, over)
    return best
