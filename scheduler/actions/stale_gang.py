"""`stale_gang`: a running gang that fell below minMember for longer than its grace period is evicted whole.

A gang below minMember holds GPUs it cannot use (a distributed job waits for its lost workers). Members
that finished successfully still count. The grace period (`PodGroup.spec.staleGraceSeconds`) lets a lost
member be recreated and placed again first; the clock is kept by the action across cycles.
"""

from __future__ import annotations

from scheduler.cache.cluster import Cluster
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction
from scheduler.model.reasons import PendingReason, Reason


class StaleGang:
    name = "stale_gang"

    def __init__(self) -> None:
        self.stale_since: dict[str, float] = {}  # since when each running gang has been below minMember

    def execute(self, session: Session, cluster: Cluster) -> None:
        now = session.now
        below: set[str] = set()
        for job in session.jobs:
            if not job.is_gang:
                continue
            f = session.facts(job)
            running = f.running
            present = len(running) + job.succeeded + len(f.reserved)  # pipelined members are on their way
            if not running or present >= job.min_member:
                continue
            below.add(job.key)
            since = self.stale_since.setdefault(job.key, now)
            left = since + job.stale_grace_s - now
            if left > 0:
                session.retry_by(session.epoch_s + left)  # a simulation advances its clock to it
                msg = (f"gang {job.key} runs {present} of {job.min_member} members; evicted whole in {left:.0f}s "
                       "unless the missing members are placed")  # fmt: skip
                for p in f.pending:
                    session.set_reason(p, Reason.GANG_BELOW_MIN_MEMBER, msg)
                session.group_reasons[job.key] = PendingReason(Reason.GANG_BELOW_MIN_MEMBER, msg)
                continue
            tx = Transaction(session, "stale_gang")
            msg = (f"gang {job.key} ran {present} of {job.min_member} members for {now - since:.0f}s "
                   f"(grace {job.stale_grace_s:g}s); evicted whole")  # fmt: skip
            for p in running:
                tx.evict(p, msg)
            tx.commit(cluster)
            del self.stale_since[job.key]
            below.discard(job.key)
        for key in list(self.stale_since):
            if key not in below:
                del self.stale_since[key]
