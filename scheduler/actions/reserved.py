"""`bind_reserved`: bind pods to the places reserved for them, once they may be bound there.

First in the pipeline, so a reserved place is taken before anything else could. Three kinds of pods hold
one (`scheduler/cache/reservations.py`): pods consolidation moved (recreated under their name or as the same
demand), pipelined pods, placed where evicted pods were still terminating, and fractions queued behind the
device plugin on a node where a pod bound by us waits for `Allocate`. A pipelined pod (a gang: all its
members together) is bound once every pod it waits for is gone, a queued fraction once no pod waits on its
node (one at a time per node: the one bound then waits in turn); until then it waits with its place kept
and is left out of the other actions. A reservation that cannot be honoured is dropped with a
reason and its pod scheduled again: nobody claimed it in time, its victims are still there when it
expires, its pod is gone or was bound elsewhere. The binds are reported as the action that planned them.
"""

from __future__ import annotations

from scheduler.cache.cluster import Cluster
from scheduler.cache.reservations import Reservation
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction, handoff_reason, pipelined_reason, pod_names
from scheduler.model.jobs import Job, job_key
from scheduler.model.reasons import Reason
from scheduler.model.resources import Resources
from scheduler.model.types import PodInfo


class BindReserved:
    name = "bind_reserved"

    def execute(self, session: Session, cluster: Cluster) -> None:
        ledger = session.ledger
        claimed = set(session.reserved.values())
        pods_by_uid = session.cache.pods
        lost: dict[str, str] = {}  # group (or key) -> why its reservations go
        for key, res in ledger.reservations().items():
            if key not in claimed and (res.uid is not None or res.expires_s <= session.now):
                lost.setdefault(res.group or key, (
                    "its pod (or a member of its gang) is gone or no longer pending"
                    if res.uid is not None else "no recreated pod claimed it in time"
                ))  # fmt: skip
        for key, res in ledger.reservations().items():
            if (res.group or key) in lost:  # a gang's places go together
                self._drop(session, key, res, lost[res.group or key])
                for uid in [u for u, k in session.reserved.items() if k == key]:
                    del session.reserved[uid]
        # The pending job each reserved pod is an unplaced member of (only theirs are looked at: a backlog
        # of pending jobs is not walked for the few pods holding a reservation).
        pending_by_key = {job.key: job for job in session.pending_jobs}
        groups: dict[str, list[tuple[PodInfo, Job, str, Reservation]]] = {}
        reservations = ledger.reservations()
        for uid, key in session.reserved.items():
            pod, found = pods_by_uid.get(uid), reservations.get(key)
            job = pending_by_key.get(job_key(pod)) if pod is not None else None
            if job is not None and not any(p.uid == uid for p in session.facts(job).unplaced):
                job = None
            if pod is None or job is None or found is None:
                continue  # its group (if any) misses it: dropped whole below
            groups.setdefault(found.group or key, []).append((pod, job, key, found))
        for group, members in groups.items():
            if (why := self._unbindable(session, group, members, reservations)) is not None:
                for key, res in reservations.items():  # a gang's places go together
                    if (res.group or key) == group:
                        self._drop(session, key, res, why)
                continue
            self._settle(session, cluster, members)
        session.reserved.clear()

    def _unbindable(
        self, session: Session, group: str, members: list[tuple[PodInfo, Job, str, Reservation]],
        reservations: dict[str, Reservation],
    ) -> str | None:  # fmt: skip
        """Why the pods of one reservation group (a gang's pipelined members) may not be bound, else None.
        They are bound all together or not at all: every place of the group must be claimed by a valid
        member still in the group, admitted to its queue, and together with the members that run (or have
        succeeded) they must reach the gang's minMember as it is now (a PodGroup edited while they waited,
        a member that became invalid or left the gang)."""
        claimed = {key for _, _, key, _ in members}
        missing = sorted(
            key for key, res in reservations.items() if (res.group or key) == group and key not in claimed
        )
        if missing:
            places = "its place" if len(missing) == 1 else "their places"
            return f"{', '.join(missing)} of its gang can no longer take {places}"
        for pod, job, _, res in members:
            if res.group is not None and job.key != group:
                return f"{pod.key} is no longer a member of {group}"
            if pod.error is not None:
                return f"{pod.key} is invalid: {pod.error}"
            if res.uid is not None and (why := self._queue_changed(session, job, res)):
                return why
        job = members[0][1]
        present = len(session.facts(job).running) + job.succeeded + len(members)
        if job.is_gang and present < job.min_member:
            return f"gang {job.key} needs {job.min_member} members; with these it would run {present}"
        return None

    @staticmethod
    def _queue_changed(session: Session, job: Job, res: Reservation) -> str | None:
        """Why a pipelined pod may no longer be bound into the queue it was admitted to while it waited:
        relabelled to another queue, its queue deleted, or its queue's limit lowered below what it holds
        (its reserved place counted). It is then scheduled again, through the queue it names now."""
        if job.queue != res.queue:
            return f"its queue is {job.queue} now, not {res.queue}"
        if job.queue not in session.tree.nodes:
            return f"its queue {job.queue} no longer exists"
        return session.tree.limit_exceeded(job.queue, Resources())

    def _settle(
        self, session: Session, cluster: Cluster, members: list[tuple[PodInfo, Job, str, Reservation]]
    ) -> None:
        """Bind a reservation's pods (a gang's together) if their victims are gone; else keep them waiting."""
        ledger = session.ledger
        first = members[0][3]
        if first.handoff and self._behind(session, members[0][0], first):
            return
        waits = frozenset().union(*(res.waits_for for _, _, _, res in members)) & ledger.releasing.keys()
        if waits and first.expires_s <= session.now:
            for _, _, key, res in members:
                self._drop(session, key, res, "the pods it waited for are still terminating")
            return
        if waits:
            names = pod_names(session, waits)
            for pod, _, _, res in members:  # each where its own place is
                node = session.state.node_names[res.placement.node]
                session.set_reason(pod, Reason.PIPELINED, pipelined_reason(node, names))
                session.pipelined.add(pod.uid)
            return
        tx = Transaction(session, first.action)
        for pod, job, key, res in members:
            ledger.unreserve(key)
            if res.uid is None:
                message = f"moved here to make room for {res.beneficiary}"
            elif res.handoff:
                message = "the device plugin has allocated the pod bound before it on this node"
            else:
                message = "its victims are gone"
            tx.place(pod, job, res.placement, message)
        outcome = tx.commit(cluster)
        for pod in outcome.bound:  # (pipelined again, behind pods evicted since: the transaction says so)
            session.verdicts.clear(pod)

    def _behind(self, session: Session, pod: PodInfo, res: Reservation) -> bool:
        """Whether a fraction queued behind the device plugin still waits: a pod waits for it on its node
        (it is told why again), or it waited too long (`expires_s`: the plugin there may be down; dropped,
        the pod is scheduled again, elsewhere if the policy finds as good a place)."""
        waiting = session.cache.handoff.mask()
        if waiting is None or not bool(waiting[res.placement.node]):
            return False
        if res.expires_s <= session.now:
            self._drop(
                session, res.pod_key, res, "the device plugin did not allocate the pod before it in time"
            )
        else:
            session.set_reason(pod, *handoff_reason(session, res.placement))
            session.pipelined.add(pod.uid)
        return True

    def _drop(self, session: Session, key: str, res: Reservation, why: str) -> None:
        session.ledger.unreserve(key)
        node = session.state.node_names[res.placement.node]
        msg = f"the place reserved on {node} for {res.pod_key} was dropped: {why}; it is scheduled again"
        pod = session.cache.pods.get(res.uid) if res.uid is not None else None
        if pod is not None and not session.ledger.on_node(pod):
            session.set_reason(pod, Reason.RESERVATION_DROPPED, msg)
        session.events.append(
            {"time_s": round(session.now, 3), "type": "ReservationDropped", "action": res.action,
             "pod": res.pod_key, "message": msg}
        )  # fmt: skip
