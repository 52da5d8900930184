"""Victims younger than their minimum runtime are left out of reclaim and preempt (KAI's `minruntime`).

Which queue's value applies, and how a job's age is measured, is `scheduler/queues/min_runtime.py`.
Here: the victim units of a search are split into those that may go now and those still protected; an
elastic gang's members above its minMember are never protected (only the gang as a whole is), as in
KAI. When protection kept a victim out, the earliest moment one becomes eligible is what the pending pod
is told ("first victim eligible in 4m10s") and when the session asks for its next cycle
(`Session.retry_by`), so a simulation advances its clock to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduler.actions.victims import Victim
from scheduler.actions.views import label
from scheduler.api.duration import show_duration
from scheduler.framework.memo import MemoKey
from scheduler.framework.session import Session
from scheduler.queues.min_runtime import MinRuntimes, job_started_s, protected_until

RUNTIMES: MemoKey[MinRuntimes] = MemoKey("min_runtimes")


def min_runtimes(session: Session) -> MinRuntimes:
    return session.memo.get(RUNTIMES, lambda: MinRuntimes(session.tree))


@dataclass(frozen=True)
class Protection:
    """The victims left out for their minimum runtime: how many, and the first to become eligible."""

    count: int
    until: float  # Unix time the first of them may go
    first: Victim
    min_runtime_s: float
    started_s: float  # when the first to go started (Unix time)

    def describe(self, action: str, now_epoch_s: float) -> str:
        """E.g. "reclaim waits for minimum runtime: first victim eligible in 4m10s (...)"."""
        job = self.first.job
        field = "reclaimMinRuntime" if action == "reclaim" else "preemptMinRuntime"
        return (
            f"{action} waits for minimum runtime: first victim eligible in "
            f"{show_duration(self.until - now_epoch_s)} ({label(job)} of queue {job.queue} started "
            f"{show_duration(now_epoch_s - self.started_s, up=False)} ago, {field} {show_duration(self.min_runtime_s)}"
            + (f"; {self.count - 1} more protected" if self.count > 1 else "")
            + ")"
        )


def split(
    session: Session, pool: list[Victim], min_runtime_of: Callable[[Victim], float]
) -> tuple[list[Victim], Protection | None]:
    """The victims that may go now, in their order, and what protection left out (None: nothing); asks
    for a cycle when the first protected one may go (whether or not this search needs it)."""
    if min_runtimes(session).none_set:
        return pool, None
    now = session.epoch_s
    free: list[Victim] = []
    first: Protection | None = None
    count = 0
    for v in pool:
        if v.elastic:  # members above minMember go one at a time whatever the gang's age (KAI)
            free.append(v)
            continue
        runtime = min_runtime_of(v)
        if runtime <= 0:
            free.append(v)
            continue
        started = job_started_s(v.pods, now)
        until = protected_until(started, runtime, now)
        if until is None or started is None:
            free.append(v)
            continue
        count += 1
        if first is None or until < first.until:
            first = Protection(0, until, v, runtime, started)
    if first is None:
        return free, None
    session.retry_by(first.until)
    return free, Protection(count, first.until, first.first, first.min_runtime_s, first.started_s)
