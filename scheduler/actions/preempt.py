"""`preempt`: inside one queue, a higher-priority job evicts lower-priority preemptible jobs (KAI's rules).

Never across queues (that is `reclaim`'s business, bound by fair shares). Victims are running jobs of the
same queue with a lower priority that are preemptible (whole gangs, or elastic members above their
minMember); the queue's limits must hold once they are gone and the job placed, and a non-preemptible job
still only uses in-quota resources (preemptible victims never count against that quota, so evicting them
cannot help it).
"""

from __future__ import annotations

from functools import partial

from scheduler.actions import min_runtime
from scheduler.actions.ordering import jobs_in_order
from scheduler.actions.solver import Evictions, VictimSolver
from scheduler.actions.victims import Victim, candidates
from scheduler.actions.views import capacity_blocked, label, waiting_jobs
from scheduler.cache.cluster import Cluster
from scheduler.framework.memo import MemoKey
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction
from scheduler.model.jobs import Job
from scheduler.model.reasons import PREEMPTING_HELPS, Reason
from scheduler.model.types import PodInfo

# Per queue, the lowest priority of its preemptible jobs: a waiting job at or below it has no victim there,
# and the victim list (every running unit of the cluster) is not made for it.
FLOOR: MemoKey[dict[str, int]] = MemoKey("preemptible_floor")


class Preempt:
    name = "preempt"

    def execute(self, session: Session, cluster: Cluster) -> None:
        meter = session.budget.action()
        tree = session.tree
        runtimes = min_runtime.min_runtimes(session)

        def preempt_s(v: Victim) -> float:
            return runtimes.preempt_s(v.job.queue)

        # Over quota or limit may be cured too: by evicting lower-priority pods of the same queue.
        for job in jobs_in_order(session, waiting_jobs(session, PREEMPTING_HELPS)):
            if meter.exhausted:
                break
            pods = capacity_blocked(session, job, PREEMPTING_HELPS)
            if not pods:
                continue
            count = session.facts(job).place_now
            request = session.request_of(pods[:count])
            if not job.preemptible and tree.quota_exceeded(job.queue, request) is not None:
                continue  # victims are preemptible: evicting them frees no quota for it
            floor = session.memo.get(FLOOR, lambda: _floor(session))
            if job.priority <= floor.get(job.queue, job.priority):
                continue
            pool, protection = min_runtime.split(
                session,
                [v for v in candidates(session) if _victim_of(job, v)],
                preempt_s,
            )
            if not pool:
                if protection is not None:
                    _tell(session, pods, protection.describe("preempt", session.epoch_s))
                continue
            tx = Transaction(session, "preempt")
            why = f"preempted by {label(job)} (priority {job.priority}) in queue {job.queue}"
            rules = Evictions(limits=partial(tree.limit_exceeded, job.queue, request))
            search = VictimSolver(session, tx, job, pods, count, rules, why, session.budget.job(meter))
            if search.solve(pool) is None:
                tx.rollback()
                if search.blocked is not None:
                    for p in pods:
                        session.set_reason(p, Reason.OVER_LIMIT, search.blocked)
                elif protection is not None:
                    _tell(session, pods, protection.describe("preempt", session.epoch_s))
                continue
            outcome = tx.commit(cluster)
            for p in outcome.bound:
                session.verdicts.clear(p)


def _floor(session: Session) -> dict[str, int]:
    out: dict[str, int] = {}
    for j in session.jobs:
        if j.preemptible and j.priority < out.get(j.queue, j.priority + 1):
            out[j.queue] = j.priority
    return out


def _tell(session: Session, pods: list[PodInfo], message: str) -> None:
    """Only victims too young for the queue's preemptMinRuntime could make room: that leads; what the
    earlier actions found stays as its context."""
    for p in pods:
        session.verdicts.retell(p, Reason.WAITING_FOR_MIN_RUNTIME, message, first=True)


def _victim_of(job: Job, v: Victim) -> bool:
    return v.job.queue == job.queue and v.job.priority < job.priority and v.job.key != job.key
