"""Jobs kept across cycles, and what each queue's jobs hold.

A job is rebuilt only when one of its pods or its PodGroup changed, or when it has pending pods (the
actions work on those); settled jobs are reused as they are. Rebuilding a job names the owner of each of
its pods' holdings in the ledger (queue, job, non-preemptible or not); `QueueUsage`, a ledger listener,
keeps per-queue sums of what the pods hold from those owners as holdings come and go, so no copy of the
usage is kept by hand anywhere.

What a running job is charged to is fixed when it starts: its queue, priority and preemptibility are
the ones it was admitted with (`Admitted`), whatever its pods' labels or its PodGroup say later, until
none of its pods runs any more; a job found running by a restarted scheduler takes them from its pods'
assignments, where the scheduler that bound them recorded them (`Admission`). A relabelled pod, or a
PodGroup edited to another queue, priority class or preemptibility, neither escapes its queue's limit nor
stops being reclaimable; the job is charged to `default` once its queue is gone.

Building a job is a containment boundary (see `scheduler/cache/containment.py`): a job that cannot be built, or
whose PodGroup is invalid, or that made a step of the cycle fail, is quarantined: left out of the jobs
until one of its pods or its PodGroup changes, its pending pods told why.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

from scheduler.api.assignment import AdmissionReading, read_assignment
from scheduler.api.keys import DEFAULT_QUEUE, GPU_ASSIGNMENT
from scheduler.api.podgroup import PodGroup
from scheduler.api.queue import Queue
from scheduler.cache.containment import RETRIED, Quarantined, failure, retry_after
from scheduler.cache.gc_pause import paused_gc
from scheduler.cache.ledger import Holding, HoldKind, Ledger, Owner, same_charge
from scheduler.model.jobs import Job, build_job, is_job_member, job_facts, job_key
from scheduler.model.types import PodInfo, PodPhase

log = logging.getLogger(__name__)

Usage = tuple[int, int, int]  # GPU milli, CPU milli, memory MiB
_CHARGED = (HoldKind.BOUND, HoldKind.ASSUMED)  # a releasing victim counts for nobody, a reserved place apart


def usage_of(h: Holding) -> Usage:
    pl = h.placement
    gpus = pl.gpus
    milli = gpus[0].milli if len(gpus) == 1 else sum(g.milli for g in gpus)  # one GPU: most pods
    return (milli, pl.cpu_milli, pl.memory_mib)


@dataclass(frozen=True, slots=True)
class Admitted:
    """What a running job is charged to and how it may be preempted, as it was admitted."""

    queue: str
    priority: int
    preemptible: bool


def claimed_usage(pod: PodInfo) -> Usage:
    """What a running pod the ledger holds no place for uses (its node unknown to this scheduler, or its
    GPUs not accountable there): the GPU shares its assignment names, else its request's."""
    raw = pod.annotations.get(GPU_ASSIGNMENT)
    if raw:
        with contextlib.suppress(ValueError):  # unreadable: its request says
            return (
                sum(g.milli for g in read_assignment(raw).gpus),
                pod.cpu_milli,
                pod.memory_mib,
            )
    req = pod.request
    milli = req.milli * req.num_devices if req.kind in ("whole", "fraction") and not pod.error else 0
    return (milli, pod.cpu_milli, pod.memory_mib)


def admitted_with(pod: PodInfo) -> AdmissionReading | None:
    """What the scheduler that bound `pod` recorded in its assignment (None: nothing, or unreadable)."""
    raw = pod.annotations.get(GPU_ASSIGNMENT)
    if not raw:
        return None
    try:
        return read_assignment(raw).admitted
    except ValueError:
        return None


class QueueUsage:
    """Per queue: what the pods of its jobs hold (all jobs, and non-preemptible jobs apart). Reserved
    places are not counted here: the session adds them to the queue they will belong to."""

    def __init__(self) -> None:
        self.all: dict[str, list[int]] = {}
        self.nonpreemptible: dict[str, list[int]] = {}
        # Running pods with no place in the ledger, by job: charged to its owner all the same (`unheld`).
        self._unheld: dict[str, tuple[Owner, tuple[Usage, ...]]] = {}

    def unheld(self, job: str, owner: Owner | None, usages: list[Usage]) -> None:
        """What job `job`'s running pods that hold no place in the ledger use, charged to `owner`: pods on a
        node this scheduler does not know (deleted before it started: no row to hold them in) or whose GPUs
        it could not account. They run, so they count toward their queue's share and limit all the same."""
        if owner is None or not usages:
            self._unheld.pop(job, None)
        else:
            self._unheld[job] = (owner, tuple(usages))

    def changed(self, old: Holding | None, new: Holding | None) -> None:
        if same_charge(old, new):
            return
        for h, sign in ((old, -1), (new, +1)):
            if h is None or h.owner is None or h.kind not in _CHARGED:  # pods only, assumed too
                continue
            books = (self.all, self.nonpreemptible) if h.owner.nonpreemptible else (self.all,)
            milli, cpu, mem = usage_of(h)
            for book in books:
                acc = book.setdefault(h.owner.queue, [0, 0, 0])
                acc[0] += sign * milli
                acc[1] += sign * cpu
                acc[2] += sign * mem

    def arrived(self, holdings: list[Holding]) -> None:
        for h in holdings:
            if h.owner is not None:  # (a relist's pods are charged to nobody until their jobs are built)
                self.changed(None, h)

    def by_queue(self, *, nonpreemptible: bool = False) -> dict[str, Usage]:
        book = self.nonpreemptible if nonpreemptible else self.all
        out = {q: (u[0], u[1], u[2]) for q, u in book.items() if any(u)}
        for owner, usages in self._unheld.values():
            if nonpreemptible and not owner.nonpreemptible:
                continue
            milli, cpu, mem = out.get(owner.queue, (0, 0, 0))
            for u in usages:
                milli, cpu, mem = milli + u[0], cpu + u[1], mem + u[2]
            out[owner.queue] = (milli, cpu, mem)
        return out


class Members:
    """Each job's member pods by uid, in first-seen order of the jobs. Most jobs are one pod (a relist's
    150,000 running pods are as many jobs): such a job is kept as the pod itself, a map of its own only
    from its second member on (a one-entry dict per job was 26 MiB of a relist)."""

    def __init__(self) -> None:
        self._by_job: dict[str, PodInfo | dict[str, PodInfo]] = {}

    def add(self, key: str, pod: PodInfo) -> None:
        """`pod` is a member of job `key` (a newer version takes its old one's place)."""
        held = self._by_job.get(key)
        if isinstance(held, dict):
            held[pod.uid] = pod
        elif held is None or held.uid == pod.uid:
            self._by_job[key] = pod
        else:
            self._by_job[key] = {held.uid: held, pod.uid: pod}

    def remove(self, key: str, uid: str) -> None:
        """Pod `uid` is no member of job `key` any more (the job's key stays, empty, until `drop`)."""
        held = self._by_job.get(key)
        if held is None:
            return
        if isinstance(held, dict):
            held.pop(uid, None)
        elif held.uid == uid:
            self._by_job[key] = {}

    def of(self, key: str) -> list[PodInfo]:
        held = self._by_job.get(key)
        if held is None:
            return []
        return list(held.values()) if isinstance(held, dict) else [held]

    def drop(self, key: str) -> None:
        self._by_job.pop(key, None)

    def keys(self) -> list[str]:
        return list(self._by_job)


class JobIndex:
    def __init__(
        self,
        ledger: Ledger,
        podgroups: dict[str, PodGroup],
        queues: Mapping[str, Queue] | None = None,
        invalid_podgroups: Mapping[str, str] | None = None,
        priority_classes: dict[str, int] | None = None,
    ) -> None:
        self.ledger = ledger
        self.podgroups = podgroups  # the mirror's, by namespace/name
        self.queues: Mapping[str, Queue] = queues if queues is not None else {}  # the mirror's, by name
        # PodGroups that failed validation (the mirror's problems): their pods wait, told why
        self.invalid_podgroups: Mapping[str, str] = invalid_podgroups if invalid_podgroups is not None else {}
        self.priority_classes = priority_classes if priority_classes is not None else {}  # name -> value
        self._succeeded: dict[str, set[str]] = {}  # job key -> uids of members that succeeded
        self.quarantined: dict[str, Quarantined] = {}
        self.generation = 0  # calls of `jobs()`: one a cycle
        self.usage = QueueUsage()
        ledger.add_listener(self.usage)
        ledger.add_pod_listener(self)  # a member placed, bound, evicted or rolled back: rebuild its job
        # Each job's member pods, keys in first-seen order as build_jobs gives them (`Members`).
        self._members = Members()
        self._jobs: dict[str, Job] = {}
        self._dirty: dict[str, None] = {}
        self._active: dict[str, None] = {}  # jobs with members not placed (`pending_jobs`)
        self._admitted: dict[str, Admitted] = {}  # running jobs: what they were admitted with
        self._admissions: dict[tuple[str, int, bool], Admitted] = {}  # each distinct one, shared

    def touch(self, key: str, *, changed: bool = True) -> None:
        """Job `key` changed (a pod, its PodGroup, what a pod holds): rebuild it next time (and try it
        again at once if it was quarantined, unless nothing the scheduler reads of it `changed`)."""
        self._dirty[key] = None
        if changed:
            self.quarantined.pop(key, None)

    def moved(self, key: str, old: Holding | None, new: Holding | None) -> None:
        """The ledger's word that a holding changed (a pod placed, bound, released; a reservation): the job
        it is charged to is rebuilt next time, since what a job is pinned to and whether it has members to
        place follow its members' places (`_pin`, `_active`). Not a change of the job itself: a quarantine
        stays. (A holding only re-owned, which `_rebuild` does, is not told.)"""
        owner = (new.owner if new is not None else None) or (old.owner if old is not None else None)
        if owner is not None:
            self._dirty[owner.job] = None

    def arrived(self, items: list[tuple[str, Holding]]) -> None:
        for _, h in items:
            if h.owner is not None:
                self._dirty[h.owner.job] = None

    def touch_queue(self, name: str) -> None:
        """Queue `name` came, changed or went: its jobs are charged again (`default` takes a gone
        queue's running pods)."""
        for key, job in self._jobs.items():
            if job.queue == name:
                self.touch(key)

    def index(self, pod: PodInfo, old: PodInfo | None, admission: AdmissionReading | None = None) -> None:
        """`pod` was added or changed (`old`: its previous version). `admission`: what the assignment of a pod
        first seen running records of its job's admission (a restarted scheduler reads each once, at the
        relist), for `_pin`; what this scheduler built the job with comes first."""
        # A status the scheduler wrote itself (a pod condition) comes back as an event too: it changes
        # nothing read here, so it does not lift a quarantine.
        same = old is not None and old == pod
        if old is not None:
            self.unindex(old, changed=not same)
        key = job_key(pod)
        self._dirty[key] = None  # `touch`, inlined: once per pod of a relist
        if not same and self.quarantined:
            self.quarantined.pop(key, None)
        if admission is not None and key not in self._jobs and key not in self._admitted:
            # (under the job's own key string, not the assignment's copy of it: 4 MiB of a relist)
            self._admitted[key] = self._shared(admission.queue, admission.priority, admission.preemptible)
        if is_job_member(pod):
            self._members.add(key, pod)
        elif pod.terminating and pod.holds_resources:
            pass  # being deleted: it stays charged to its queue's limit until it is gone (releasing)
        else:  # a finished pod, or not ours: whatever it still holds is nobody's usage
            self.ledger.reown(pod.uid, None)
            if pod.ours and pod.phase is PodPhase.SUCCEEDED:  # still counts toward its gang's minMember
                self._succeeded.setdefault(key, set()).add(pod.uid)

    def unindex(self, pod: PodInfo, *, changed: bool = True) -> None:
        key = job_key(pod)
        self.touch(key, changed=changed)
        self._members.remove(key, pod.uid)
        done = self._succeeded.get(key)
        if done is not None:
            done.discard(pod.uid)
            if not done:
                del self._succeeded[key]

    def touch_all(self) -> None:
        """Every job is rebuilt next time (a PriorityClass changed)."""
        self._dirty.update(dict.fromkeys(self._members.keys()))

    def jobs(self) -> list[Job]:
        """All jobs, as `build_jobs(pods, podgroups)` gives them, rebuilding only the jobs whose pods,
        PodGroup, queue or members' places changed (`touch`, `moved`); the owners of their pods' holdings
        follow along. Quarantined jobs are left out."""
        self.generation += 1
        for key, q in list(self.quarantined.items()):
            if q.until <= self.generation:  # its backoff is over: try it again
                self._dirty[key] = None
        with paused_gc(len(self._dirty)):
            self._rebuild(list(self._dirty))
        self._dirty.clear()
        return [job for key, job in self._jobs.items() if not self._left_out(key)]

    def _rebuild(self, keys: list[str]) -> None:
        for key in keys:
            members = self._members.of(key)
            if not members:
                self._members.drop(key)
                self._jobs.pop(key, None)
                self._active.pop(key, None)
                self._admitted.pop(key, None)
                self.quarantined.pop(key, None)
                self.usage.unheld(key, None, [])
                continue
            if key in self.quarantined and self.quarantined[key].until > self.generation:
                continue
            if (problem := self.invalid_podgroups.get(key)) is not None and key not in self.podgroups:
                self.quarantine(key, problem)
                continue
            try:
                job = build_job(
                    key, members, self.podgroups,
                    succeeded=len(self._succeeded.get(key, ())), priority_classes=self.priority_classes,
                )  # fmt: skip
                job = self._pin(job)
            except Exception as exc:  # one job: see scheduler/cache/containment.py
                log.exception("building job %s failed", key)
                self.quarantine(key, f"the scheduler failed on this pod's job ({failure(exc)}); {RETRIED}")
                continue
            self._jobs[key] = job
            owner = Owner(job.queue, job.key, not job.preemptible)
            if key in self.quarantined:  # tried again after its backoff: it stays on probation (strikes)
                self.quarantined[key] = replace(self.quarantined[key], until=self.generation)
            held, releasing = self.ledger.pods, self.ledger.releasing
            unheld = []
            for p in job.members:
                if p.uid in held:
                    self.ledger.reown(p.uid, owner)
                elif p.holds_resources and p.uid not in releasing:
                    unheld.append(claimed_usage(p))
            self.usage.unheld(key, owner, unheld)
            if job_facts(job, self.ledger).unplaced:
                self._active[key] = None
            else:
                self._active.pop(key, None)

    def _left_out(self, key: str) -> bool:
        q = self.quarantined.get(key)
        return q is not None and q.until > self.generation

    def _shared(self, queue: str, priority: int, preemptible: bool) -> Admitted:
        """One `Admitted` per distinct admission: a relist's jobs were admitted with a few (queue, priority)
        pairs."""
        what = (queue, priority, preemptible)
        shared = self._admissions.get(what)
        if shared is None:
            if len(self._admissions) >= 4096:
                self._admissions.clear()
            shared = self._admissions[what] = Admitted(*what)
        return shared

    def _pin(self, job: Job) -> Job:
        """A running job keeps the queue, priority and preemptibility it was admitted with: those of the
        version the actions placed (the last one built while nothing of it ran), else those its pods'
        assignments record (a restarted scheduler), else what its objects say now. It is charged to
        `default` once its queue is gone (and stays there). A job with nothing running takes what its labels
        or PodGroup say, checked by the actions."""
        running = [p for p in job.members if self.ledger.on_node(p)]
        if not running:
            self._admitted.pop(job.key, None)
            return job
        pinned = self._admitted.get(job.key) or self._admission(job, running)
        if pinned.queue not in self.queues and pinned.queue != DEFAULT_QUEUE:
            pinned = replace(pinned, queue=DEFAULT_QUEUE)
        self._admitted[job.key] = pinned
        if (job.queue, job.priority, job.preemptible) == (pinned.queue, pinned.priority, pinned.preemptible):
            return job  # as admitted (the common case: a relist builds every running job)
        return replace(job, queue=pinned.queue, priority=pinned.priority, preemptible=pinned.preemptible)

    def _admission(self, job: Job, running: list[PodInfo]) -> Admitted:
        before = self._jobs.get(job.key)
        if before is not None:
            return self._shared(before.queue, before.priority, before.preemptible)
        for pod in running:
            if (admission := admitted_with(pod)) is not None and admission.job == job.key:
                return self._shared(admission.queue, admission.priority, admission.preemptible)
        held = self.ledger.pods
        queue = job.queue
        for pod in running:  # (a loop, not a generator: once per running pod of a relist, most without one)
            h = held.get(pod.uid)
            if h is not None and h.owner is not None:
                queue = h.owner.queue
                break
        return self._shared(queue, job.priority, job.preemptible)

    def pending_jobs(self) -> list[Job]:
        """The jobs with members not placed (pending or invalid), as of the last `jobs()`, in the same
        order as it returned them."""
        return [job for key, job in self._jobs.items() if key in self._active and not self._left_out(key)]

    # ------------------------------------------------------------------------------------ quarantine
    def quarantine(self, key: str, message: str) -> bool:
        """Leave job `key` out of scheduling until one of its pods or its PodGroup changes, or its backoff
        is over; its pending pods are told `message`. False when no such job exists (nothing to leave out)."""
        members = self._members.of(key)
        if not members:
            return False
        old = self.quarantined.get(key)
        strikes = old.strikes + 1 if old is not None else 1
        until = self.generation + retry_after(strikes)
        self.quarantined[key] = Quarantined(message, tuple(members), until, strikes)
        return True

    def quarantined_pods(self) -> list[tuple[PodInfo, str]]:
        """Pending pods of the jobs left out now, with why they wait."""
        return [
            (p, q.message)
            for key, q in self.quarantined.items()
            if self._left_out(key)
            for p in q.members
            if not self.ledger.on_node(p)
        ]
