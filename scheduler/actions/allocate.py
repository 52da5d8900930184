"""`allocate`: place pending jobs on free capacity, gangs whole or not at all."""

from __future__ import annotations

import time

from scheduler.actions.ordering import JobOrder
from scheduler.actions.topology_placement import place_in_topology
from scheduler.cache.cluster import Cluster
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction
from scheduler.model.jobs import Job
from scheduler.model.reasons import Reason
from scheduler.model.types import PodInfo
from scheduler.placement.explain import explain_unschedulable
from scheduler.state.demand import PodDemand, demand_for


def to_place(job: Job) -> int:
    """How many members to place at once: minMember's worth, else one more (an elastic gang grows one pod
    at a time, taking its turn with the other jobs as KAI Scheduler does)."""
    return min(len(job.pending), max(job.need, 1))


def admissible(session: Session, job: Job) -> tuple[Reason, str] | None:
    """(reason, message) when the job's queue may not take the members it would place now, else None."""
    tree = session.tree
    request = session.request_of(job.pending[: to_place(job)])  # gpu-memory: its largest possible share
    if (msg := tree.limit_exceeded(job.queue, request)) is not None:
        return (Reason.OVER_LIMIT, msg)
    if not job.preemptible and (msg := tree.quota_exceeded(job.queue, request)) is not None:
        return (Reason.OVER_QUOTA, msg)
    return None


def try_place_job(
    session: Session, job: Job, tx: Transaction, unplaceable: dict[PodDemand, str], limit: int | None = None
) -> int:
    """Place pending members in order, at most `limit` (all that fit without one); return how many.

    `unplaceable` remembers demands that fit nowhere on the committed state: allocate only ever fills
    the cluster, so an identical demand will not fit later in the same action either. Failures seen while
    this transaction holds placements are not remembered: those placements may yet be rolled back.
    """
    placed = 0
    for i, pod in enumerate(job.pending):
        if limit is not None and placed == limit:
            break
        d = demand_for(pod)
        # Inter-pod rules depend on the pod, not only its demand, and a placement can satisfy them (affinity):
        # such a pod is never taken for an identical one that failed.
        interpod = session.cache.pod_topology.applies(d) or bool(d.scope and d.scope.constraints.claims)
        msg = None if interpod else unplaceable.get(d)
        t0 = time.perf_counter()
        pl = None if msg is not None else session.place(d)
        t1 = time.perf_counter()
        session.add_time("scoring", t1 - t0)
        if pl is None:
            if msg is None:
                msg = explain_unschedulable(session.state, d, session.cache.pod_rules(d))

                if not tx.ops and not interpod:
                    unplaceable[d] = msg

            session.set_reason(pod, Reason.UNSCHEDULABLE, msg)
            if placed + (len(job.pending) - i - 1) < job.need:
                break  # the gang can no longer reach minMember
            continue
        tx.place(pod, job, pl)
        session.add_time("commit", time.perf_counter() - t1)
        placed += 1
    return placed


def _schedulable(session: Session) -> list[Job]:
    """The jobs with pending pods worth placing: invalid pods and pods of invalid queues are told why."""
    out = []
    for job in session.pending_jobs:  # the others have nothing to allocate
        for p in job.pending:
            if p.error:
                session.set_reason(p, Reason.INVALID_REQUEST, p.error)
        for p in job.pending:
            if p.gates and not p.error:
                session.set_reason(
                    p, Reason.SCHEDULING_GATED, f"waits for its scheduling gates: {', '.join(p.gates)}"
                )
        job.reserved += [p for p in job.pending if p.uid in session.pipelined]  # placed, waiting for victims
        job.invalid = [p for p in job.pending if p.error]
        job.pending = [
            p for p in job.pending if not p.error and not p.gates and p.uid not in session.pipelined
        ]

        if not job.pending:
            continue
        if (err := session.tree.leaf_error(job.queue)) is not None:
            for p in job.pending:
                session.set_reason(p, Reason.INVALID_QUEUE, err)
            continue
        out.append(job)
    return out


def _tell_unplaced(session: Session, job: Job) -> None:
    """A gang whose members did not all fit is told why, with the last pod's reason."""
    failed = [session.reasons[p.uid].message for p in job.pending if p.uid in session.reasons]
    detail = failed[-1] if failed else "capacity taken by earlier placements"
    if job.is_gang and job.need > 0:
        msg = f"gang {job.key} needs {job.need} more pods placed together; not all fit: {detail}"
        _tell_all(session, job, Reason.GANG_UNSCHEDULABLE, msg)
    elif job.is_gang:  # elastic: minMember runs already, these members are extra
        msg = (f"gang {job.key} runs its minMember ({job.min_member}); its extra members wait for "
               f"room: {detail}")  # fmt: skip
        _tell_all(session, job, Reason.UNSCHEDULABLE, msg)


def _incomplete(job: Job) -> str:
    """Why a gang with too few members to place waits: too few exist, or some cannot be read (or ask for
    what cannot be given) and the gang does not start without them."""
    exist = len(job.pending) + len(job.running)
    if not job.invalid:
        return f"gang {job.key} needs {job.min_member} pods; only {exist} exist"
    names = ", ".join(p.key for p in job.invalid[:3]) + (", ..." if len(job.invalid) > 3 else "")
    verb = "is" if len(job.invalid) == 1 else "are"
    return (f"gang {job.key} needs {job.min_member} pods; only {exist} can be scheduled: {names} {verb} "
            "invalid (each is told why)")  # fmt: skip


def _tell_all(session: Session, job: Job, reason: Reason, message: str) -> None:
    for p in job.pending:
        session.set_reason(p, reason, message)


class Allocate:
    name = "allocate"

    def execute(self, session: Session, cluster: Cluster) -> None:
        unplaceable: dict[PodDemand, str] = {}
        order = JobOrder(session, _schedulable(session))
        for job in order.jobs():
            if job.is_gang and len(job.pending) < job.need:
                _tell_all(session, job, Reason.GANG_INCOMPLETE, _incomplete(job))
                continue
            verdict = admissible(session, job)
            if verdict is not None:
                _tell_all(session, job, *verdict)
                continue
            tx = Transaction(session, "allocate")
            if job.topology is not None:  # inside one domain of its topology, or told why not
                if not place_in_topology(session, tx, job, job.pending, to_place(job), fill=False):
                    tx.rollback()
                    continue
            else:
                placed = try_place_job(session, job, tx, unplaceable, to_place(job))
                if placed == 0 or placed < job.need:
                    tx.rollback()
                    _tell_unplaced(session, job)
                    continue
            t0 = time.perf_counter()
            outcome = tx.commit(cluster)
            session.add_time("commit", time.perf_counter() - t0)
            for p in outcome.bound:
                session.reasons.pop(p.uid, None)
            reserved = len(job.reserved)
            _settle(session, job, outcome.bound)
            if job.pending and (outcome.bound or len(job.reserved) > reserved):
                order.push(job)  # its next members take their turn


def _settle(session: Session, job: Job, bound: list[PodInfo]) -> None:
    """Members bound move to the job's running ones, pipelined ones to its reserved ones."""
    done = {p.uid for p in bound}
    job.running += [p for p in job.pending if p.uid in done]
    job.reserved += [p for p in job.pending if p.uid in session.pipelined]
    job.pending = [p for p in job.pending if p.uid not in done and p.uid not in session.pipelined]
