"""Jobs kept across cycles, and what each queue's jobs hold.

A job is rebuilt only when one of its pods or its PodGroup changed, or when it has pending pods (the
actions work on those); settled jobs are reused as they are. Rebuilding a job names the owner of each of
its pods' holdings in the ledger (queue, job, non-preemptible or not); `QueueUsage`, a ledger listener,
keeps per-queue sums of what the pods hold from those owners as holdings come and go, so no copy of the
usage is kept by hand anywhere.
"""

from __future__ import annotations

from scheduler.api.podgroup import PodGroup
from scheduler.jobs import Job, build_job, is_job_member, job_key
from scheduler.ledger import Holding, HoldKind, Ledger, Owner, same_charge
from scheduler.model import PodInfo, PodPhase

Usage = tuple[int, int, int]  # GPU milli, CPU milli, memory MiB
_CHARGED = (HoldKind.BOUND, HoldKind.ASSUMED)  # a releasing victim counts for nobody, a reserved place apart


def usage_of(h: Holding) -> Usage:
    pl = h.placement
    return (sum(g.milli for g in pl.gpus), pl.cpu_milli, pl.memory_mib)


class QueueUsage:
    """Per queue: what the pods of its jobs hold (all jobs, and non-preemptible jobs apart). Reserved
    places are not counted here: the session adds them to the queue they will belong to."""

    def __init__(self) -> None:
        self.all: dict[str, list[int]] = {}
        self.nonpreemptible: dict[str, list[int]] = {}

    def changed(self, old: Holding | None, new: Holding | None) -> None:
        if same_charge(old, new):
            return
        for h, sign in ((old, -1), (new, +1)):
            if h is None or h.owner is None or h.kind not in _CHARGED:  # pods only, assumed too
                continue
            books = (self.all, self.nonpreemptible) if h.owner.nonpreemptible else (self.all,)
            for book in books:
                acc = book.setdefault(h.owner.queue, [0, 0, 0])
                for i, v in enumerate(usage_of(h)):
                    acc[i] += sign * v

    def by_queue(self, *, nonpreemptible: bool = False) -> dict[str, Usage]:
        book = self.nonpreemptible if nonpreemptible else self.all
        return {q: (u[0], u[1], u[2]) for q, u in book.items() if any(u)}


class JobIndex:
    def __init__(
        self, ledger: Ledger, podgroups: dict[str, PodGroup], priority_classes: dict[str, int] | None = None
    ) -> None:
        self.ledger = ledger
        self.podgroups = podgroups  # the mirror's, by namespace/name
        self.priority_classes = priority_classes if priority_classes is not None else {}  # name -> value
        self._succeeded: dict[str, set[str]] = {}  # job key -> uids of members that succeeded
        self.usage = QueueUsage()
        ledger.add_listener(self.usage)
        # Keys in first-seen order, as build_jobs gives them.
        self._members: dict[str, dict[str, PodInfo]] = {}
        self._jobs: dict[str, Job] = {}
        self._dirty: dict[str, None] = {}
        self._active: dict[str, None] = {}  # jobs with pending pods: rebuilt every cycle

    def touch(self, key: str) -> None:
        """Job `key` changed (a pod, its PodGroup, what a pod holds): rebuild it next time."""
        self._dirty[key] = None

    def index(self, pod: PodInfo, old: PodInfo | None) -> None:
        """`pod` was added or changed (`old`: its previous version)."""
        if old is not None:
            self.unindex(old)
        key = job_key(pod)
        self._dirty[key] = None
        if is_job_member(pod):
            self._members.setdefault(key, {})[pod.uid] = pod
        else:  # a finished pod, or not ours: whatever it still holds is nobody's usage
            self.ledger.reown(pod.uid, None)
            if pod.ours and pod.phase is PodPhase.SUCCEEDED:  # still counts toward its gang's minMember
                self._succeeded.setdefault(key, set()).add(pod.uid)

    def unindex(self, pod: PodInfo) -> None:
        key = job_key(pod)
        self._dirty[key] = None
        members = self._members.get(key)
        if members is not None:
            members.pop(pod.uid, None)
        done = self._succeeded.get(key)
        if done is not None:
            done.discard(pod.uid)
            if not done:
                del self._succeeded[key]

    def touch_all(self) -> None:
        """Every job is rebuilt next time (a PriorityClass changed)."""
        self._dirty.update(dict.fromkeys(self._members))

    def jobs(self) -> list[Job]:
        """All jobs, as `build_jobs(pods, podgroups)` gives them, rebuilding only the jobs whose pods
        changed or that have pending pods; the owners of their pods' holdings follow along."""
        for key in list({**self._dirty, **self._active}):
            members = self._members.get(key)
            if not members:
                self._members.pop(key, None)
                self._jobs.pop(key, None)
                self._active.pop(key, None)
                continue
            job = self._jobs[key] = build_job(
                key, list(members.values()), self.podgroups,
                succeeded=len(self._succeeded.get(key, ())), priority_classes=self.priority_classes,
            )  # fmt: skip
            owner = Owner(job.queue, job.key, not job.preemptible)
            for p in (*job.running, *job.pending):
                self.ledger.reown(p.uid, owner)
            if job.pending:
                self._active[key] = None
            else:
                self._active.pop(key, None)
        self._dirty.clear()
        return list(self._jobs.values())

    def pending_jobs(self) -> list[Job]:
        """The jobs with pending pods, as of the last `jobs()`, in the same order as it returned them."""
        return [job for job in self._jobs.values() if job.pending]
