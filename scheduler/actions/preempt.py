"""`preempt`: inside one queue, a higher-priority job evicts lower-priority preemptible jobs.

Never across queues (that is `reclaim`'s business, bound by fair shares). The queue may not grow through
preemption beyond what it held or its fair share, whichever is larger; limits hold, and a non-preemptible
job still only uses in-quota resources.
"""

from __future__ import annotations

import time
from functools import partial

from scheduler.actions.ordering import jobs_in_order
from scheduler.actions.queue_checks import EPS, contended
from scheduler.actions.victims import VictimSearch, candidates
from scheduler.actions.views import capacity_blocked, label, need_now, request_of, waiting_jobs
from scheduler.cluster import Cluster
from scheduler.jobs import Job
from scheduler.reasons import PREEMPTING_HELPS
from scheduler.resources import Resources
from scheduler.session import Session
from scheduler.transaction import Transaction

ACTION_BUDGET_S = 0.25


class Preempt:
    name = "preempt"

    def execute(self, session: Session, cluster: Cluster) -> None:
        start = time.perf_counter()
        # Over quota or limit may be cured too: by evicting lower-priority pods of the same queue.
        for job in jobs_in_order(session, waiting_jobs(session, PREEMPTING_HELPS)):
            if time.perf_counter() - start > ACTION_BUDGET_S:
                break
            pods = capacity_blocked(session, job, PREEMPTING_HELPS)
            if not pods:
                continue
            count = need_now(session, job)
            request = request_of(pods[:count])
            pool = [
                v for v in candidates(session)
                if v.job.queue == job.queue and v.job.priority < job.priority and v.job.key != job.key
            ]  # fmt: skip
            if not pool:
                continue
            before = {n.name: n.allocated for n in session.tree.ancestors(job.queue)}
            tx = Transaction(session, "preempt")
            why = f"preempted by {label(job)} (priority {job.priority}) in queue {job.queue}"
            room = partial(_queue_allows, session, job, request, before)
            search = VictimSearch(session, tx, job, pods, count, lambda v: True, why, room)
            if search.run(pool) is None:
                tx.rollback()
                continue
            outcome = tx.commit(cluster)
            for p in outcome.bound:
                session.reasons.pop(p.uid, None)


def _queue_allows(session: Session, job: Job, request: Resources, before: dict[str, Resources]) -> bool:
    return _queue_problem(session, job, request, before) is None


def _queue_problem(
    session: Session, job: Job, request: Resources, before: dict[str, Resources]
) -> str | None:
    """Why placing the job now, with the victims evicted so far, breaks a queue rule; None if it does not."""
    tree = session.tree
    if (msg := tree.limit_exceeded(job.queue, request)) is not None:
        return msg
    if not job.preemptible and (msg := tree.quota_exceeded(job.queue, request)) is not None:
        return msg
    for node in tree.ancestors(job.queue):
        for r in contended(request):
            ceiling = max(before[node.name].get(r), node.fair_share.get(r))
            if node.allocated.get(r) + request.get(r) > ceiling + EPS:
                return f"queue {node.name} would grow past its fair share"
    return None
