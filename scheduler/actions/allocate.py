"""`allocate`: place pending jobs on free capacity, gangs whole or not at all."""

from __future__ import annotations

import time

from scheduler.actions.ordering import JobOrder
from scheduler.actions.topology_placement import place_in_topology
from scheduler.cache.cluster import Cluster
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction
from scheduler.model.jobs import Job, JobFacts
from scheduler.model.reasons import Reason
from scheduler.model.types import Placement
from scheduler.placement.explain import explain_unschedulable
from scheduler.state.demand import PodDemand, demand_for


class FillFirst:
    """Allocate's use of `Session.fill_first` for single fractions (a gang's members are placed together,
    never queued). A demand with no GPU in use to take stays so until something is bound or queued (the
    GPU it starts is one): identical pods are not looked at again meanwhile."""

    def __init__(self) -> None:
        self._none: set[PodDemand] = set()

    def place(self, session: Session, d: PodDemand, pl: Placement | None) -> tuple[Placement, bool] | None:
        if d in self._none or (pl is not None and session.shares(pl)):
            return None
        better = session.fill_first(d, pl)
        if better is None:
            self._none.add(d)
        return better

    def changed(self) -> None:
        self._none.clear()


def admissible(session: Session, job: Job) -> tuple[Reason, str] | None:
    """(reason, message) when the job's queue may not take the members it would place now, else None."""
    tree = session.tree
    f = session.facts(job)
    request = session.request_of(list(f.pending[: f.place_now]))  # gpu-memory: its largest possible share
    if (msg := tree.limit_exceeded(job.queue, request)) is not None:
        return (Reason.OVER_LIMIT, msg)
    if not job.preemptible and (msg := tree.quota_exceeded(job.queue, request)) is not None:
        return (Reason.OVER_QUOTA, msg)
    return None


def try_place_job(
    session: Session,
    f: JobFacts,
    tx: Transaction,
    unplaceable: dict[PodDemand, tuple[Reason, str]],
    limit: int | None = None,
    handoff: FillFirst | None = None,
) -> tuple[int, tuple[PodDemand, str] | None]:
    """Place pending members in order, at most `limit` (all that fit without one); return how many, and
    the demand of the last one that did not fit with why it did not there and then (None: all fitted).

    `unplaceable` remembers demands that fit nowhere on the committed state (and why): allocate only ever
    fills the cluster and the nodes waiting for the device plugin only grow, so an identical demand will
    not fit later in the same action either. Failures seen while this transaction holds placements are not
    remembered: those placements may yet be rolled back. `handoff`: for a single pod (None: a gang's
    members, placed together or not at all), a GPU in use rather than an unused one, behind the device
    plugin on a node where a pod waits for it if need be (`Session.fill_first`); queued, it counts as placed.
    """
    placed = 0
    failure: tuple[PodDemand, str] | None = None
    for i, pod in enumerate(f.pending):
        if limit is not None and placed == limit:
            break
        d = demand_for(pod)
        # Inter-pod rules depend on the pod, not only its demand, and a placement can satisfy them (affinity):
        # such a pod is never taken for an identical one that failed.
        interpod = session.cache.pod_topology.applies(d) or bool(d.scope and d.scope.constraints.claims)
        why = None if interpod else unplaceable.get(d)
        t0 = time.perf_counter()
        pl = None if why is not None else session.place(d)
        t1 = time.perf_counter()
        session.add_time("scoring", t1 - t0)
        better = handoff.place(session, d, pl) if handoff is not None else None
        if better is not None and handoff is not None:
            pl, behind = better
            if behind:
                tx.queue_behind(pod, f.job, pl)
                handoff.changed()
                session.add_time("commit", time.perf_counter() - t1)
                placed += 1
                continue
        if pl is None:
            if why is None:
                why = session.why_unplaced(d)
                if not tx.ops and not interpod:
                    unplaceable[d] = why
            session.set_reason(pod, *why)
            failure = (d, why[1])
            if placed + (len(f.pending) - i - 1) < f.need:
                break  # the gang can no longer reach minMember
            continue
        tx.place(pod, f.job, pl)
        session.add_time("commit", time.perf_counter() - t1)
        placed += 1
    return placed, failure


def _schedulable(session: Session) -> list[Job]:
    """The jobs with pending pods worth placing: invalid pods and pods of invalid queues are told why."""
    out = []
    for job in session.pending_jobs:  # the others have nothing to allocate
        f = session.facts(job)
        for p in f.invalid:  # never placed as they are: an invalid request, or scheduling gates still on
            if p.error is not None:
                session.set_reason(p, Reason.INVALID_REQUEST, p.error)
            else:
                session.set_reason(
                    p, Reason.SCHEDULING_GATED, f"waits for its scheduling gates: {', '.join(p.gates)}"
                )
        if not f.pending:
            continue
        # The queue must be a leaf open to the job's namespace (docs/tenancy.md): a cluster without the
        # webhook learns here that its pods named one they may not use.
        if (err := session.tree.leaf_error(job.queue, f.pending[0].namespace)) is not None:
            for p in f.pending:
                session.set_reason(p, Reason.INVALID_QUEUE, err)
            continue
        out.append(job)
    return out


def _tell_unplaced(session: Session, f: JobFacts, placed: int, failure: tuple[PodDemand, str] | None) -> None:
    """A gang whose members did not all fit is told why. The members placed before one did not fit are
    rolled back by now: why that one did not fit then (its own gang had taken the room) is said only
    when none fitted, else how many fit at once, and why the others fit nowhere if they do not."""
    job = f.job
    detail = failure[1] if failure is not None else "capacity taken by earlier placements"
    if job.is_gang and f.need > 0:
        head = f"gang {job.key} needs {f.need} more pods placed together"
        if placed == 0:
            msg = f"{head}; not all fit: {detail}"
        else:
            msg = f"{head}; only {placed} fit at once now"
            if failure is not None and not bool(session.xp.any(session.feasible(failure[0])[0])):
                rules = session.cache.pod_rules(failure[0])
                msg += f", the others nowhere: {explain_unschedulable(session.state, failure[0], rules)}"
        _tell_all(session, f, Reason.GANG_UNSCHEDULABLE, msg)
    elif job.is_gang:  # elastic: minMember runs already, these members are extra
        msg = (f"gang {job.key} runs its minMember ({job.min_member}); its extra members wait for "
               f"room: {detail}")  # fmt: skip
        _tell_all(session, f, Reason.UNSCHEDULABLE, msg)


def _incomplete(f: JobFacts) -> str:
    """Why a gang with too few members to place waits: too few exist, or some cannot be read (or ask for
    what cannot be given) and the gang does not start without them."""
    job = f.job
    exist = len(f.pending) + len(f.running)
    if not f.invalid:
        return f"gang {job.key} needs {job.min_member} pods; only {exist} exist"
    names = ", ".join(p.key for p in f.invalid[:3]) + (", ..." if len(f.invalid) > 3 else "")
    verb = "is" if len(f.invalid) == 1 else "are"
    what = "invalid" if all(p.error is not None for p in f.invalid) else "invalid or scheduling-gated"
    return (f"gang {job.key} needs {job.min_member} pods; only {exist} can be scheduled: {names} {verb} "
            f"{what} (each is told why)")  # fmt: skip


def _tell_all(session: Session, f: JobFacts, reason: Reason, message: str) -> None:
    for p in f.pending:
        session.set_reason(p, reason, message)


class Allocate:
    name = "allocate"

    def execute(self, session: Session, cluster: Cluster) -> None:
        unplaceable: dict[PodDemand, tuple[Reason, str]] = {}
        jobs = _schedulable(session)
        # Pods wait for a device plugin here: a single fraction fills a GPU in use first (Session.fill_first)
        handoff = FillFirst() if session.cache.handoff.rule is not None else None
        order = JobOrder(session, jobs)
        for job in order.jobs():
            f = session.facts(job)
            if f.incomplete:
                _tell_all(session, f, Reason.GANG_INCOMPLETE, _incomplete(f))
                continue
            verdict = admissible(session, job)
            if verdict is not None:
                _tell_all(session, f, *verdict)
                continue
            tx = Transaction(session, "allocate")
            if job.topology is not None:  # inside one domain of its topology, or told why not
                if not place_in_topology(session, tx, job, list(f.pending), f.place_now, fill=False):
                    tx.rollback()
                    continue
            else:
                single = None if job.is_gang else handoff
                placed, failure = try_place_job(session, f, tx, unplaceable, f.place_now, single)
                if placed == 0 or placed < f.need:
                    tx.rollback()
                    _tell_unplaced(session, f, placed, failure)
                    continue
            t0 = time.perf_counter()
            outcome = tx.commit(cluster)
            session.add_time("commit", time.perf_counter() - t0)
            for p in outcome.bound:
                session.verdicts.clear(p)
            if outcome.bound and handoff is not None:
                handoff.changed()
            after = session.facts(job)
            if after.pending and (outcome.bound or len(after.reserved) > len(f.reserved)):
                order.push(job)  # its next members take their turn
