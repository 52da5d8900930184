"""Jobs: the unit the actions schedule. A job is a gang (PodGroup) or a single pod."""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import fields
from typing import Protocol

from scheduler.api.podgroup import PodGroup
from scheduler.api.priority import resolve_priority
from scheduler.api.topology import TopologyConstraint, constraint_from_annotations
from scheduler.model.frozen import frozen_for_the_checker
from scheduler.model.types import PodInfo, PodPhase


@frozen_for_the_checker  # (model/frozen.py: one per running job after a relist)
class Job:
    """A job as its pods and PodGroup define it: who its members are and what they ask together. It does
    not change during a cycle; where its members are now (running, pipelined, still to place) is derived
    from the ledger by `job_facts`."""

    key: str
    queue: str
    priority: int
    preemptible: bool
    min_member: int
    created_s: float
    members: tuple[PodInfo, ...] = ()  # live members (not finished, not being deleted), oldest first
    is_gang: bool = False
    explicit_group: bool = True  # False when the PodGroup object is missing and minMember was inferred
    stale_grace_s: float = 60.0
    succeeded: int = 0  # members that finished successfully: they count toward minMember
    # Where its pods must or should sit together (PodGroup spec, else the first pod's annotations).
    topology: TopologyConstraint | None = None


class Places(Protocol):
    """Who holds a place, as the ledger (`scheduler/cache/ledger.py`) keeps it, by pod uid."""

    @property
    def pods(self) -> Mapping[str, object]: ...  # bound, bound by us in flight, or seen running

    @property
    def releasing(self) -> Mapping[str, object]: ...  # evicted or being deleted, still terminating


@frozen_for_the_checker
class JobFacts:
    """Where a job's members are at one moment of the cycle (`job_facts`). Each member is in at most one
    of the lists, each list in the job's member order; a member evicted (or being deleted) that still
    terminates is in none: it counts for nothing any more."""

    job: Job
    running: tuple[PodInfo, ...]  # holding a place in the ledger (bound, bound by us in flight, running)
    reserved: tuple[PodInfo, ...]  # pipelined: placed, bound once the pods they wait for are gone
    pending: tuple[PodInfo, ...]  # to place: valid, neither on a node nor pipelined
    # not placed and never placed as they are (invalid, or scheduling-gated): told why (a gang waits for them)
    invalid: tuple[PodInfo, ...]
    unplaced: tuple[PodInfo, ...]  # pending and invalid together, in member order
    # On a node as the watch shows, with no place in the ledger (its node not seen yet, or its GPUs not
    # accountable): it runs, so it counts toward minMember, but no action can move or evict it.
    unaccounted: int = 0

    @property
    def need(self) -> int:
        """How many pending members must be placed together for the gang to run (members running, done
        or with a place reserved count toward minMember); 1 for a single pod waiting, 0 once it runs."""
        job = self.job
        on_nodes = len(self.running) + self.unaccounted
        return max(0, job.min_member - on_nodes - job.succeeded - len(self.reserved))

    @property
    def incomplete(self) -> bool:
        """Fewer valid members wait than must be placed together: placing any would not start the gang."""
        return len(self.pending) < self.need

    @property
    def place_now(self) -> int:
        """How many members to place together now: minMember's worth, else one (an elastic gang grows one
        member at a time, taking its turn with the other jobs as KAI Scheduler does); never more than wait."""
        return min(len(self.pending), max(self.need, 1))

    def sort_key(self) -> tuple[int, int, float, str]:
        """Higher priority first; then a gang below its minMember, one at it, then elastic growth above it
        (KAI's job order); then the older job."""
        job = self.job
        held = len(self.running) + self.unaccounted + job.succeeded
        state = 0 if held < job.min_member else (1 if held == job.min_member else 2)
        return (-job.priority, state, job.created_s, job.key)


def job_facts(job: Job, places: Places, pipelined: Container[str] = ()) -> JobFacts:
    """The one rule for where a job's members are: the ledger's `places` (who holds one, who is
    releasing it) and `pipelined`, the uids whose place is reserved until their victims are gone (the
    session's)."""
    held, releasing = places.pods, places.releasing
    running: list[PodInfo] = []
    reserved: list[PodInfo] = []
    pending: list[PodInfo] = []
    invalid: list[PodInfo] = []
    unplaced: list[PodInfo] = []
    unaccounted = 0
    for p in job.members:
        if p.uid in held:
            running.append(p)
        elif p.uid in pipelined:
            reserved.append(p)
        elif p.uid in releasing:
            continue
        elif p.holds_resources:
            unaccounted += 1
        else:
            # an invalid request, or scheduling gates still on: not placed as it is (a gang waits for it)
            (pending if p.error is None and not p.gates else invalid).append(p)
            unplaced.append(p)
    return JobFacts(
        job, tuple(running), tuple(reserved), tuple(pending), tuple(invalid), tuple(unplaced), unaccounted
    )


def is_job_member(pod: PodInfo) -> bool:
    """Our live pods form jobs; pods of other schedulers, finished pods and pods being deleted do not."""
    return pod.ours and pod.phase not in (PodPhase.SUCCEEDED, PodPhase.FAILED) and not pod.terminating


def job_key(pod: PodInfo) -> str:
    key = pod.job_memo
    if key is None:
        key = pod.group or f"pod:{pod.namespace}/{pod.name}"
        object.__setattr__(pod, "job_memo", key)  # frozen: a cache of its own fields, not a change
    return key


def build_jobs(
    pods: Iterable[PodInfo], podgroups: dict[str, PodGroup], priority_classes: Mapping[str, int] | None = None
) -> list[Job]:
    """Group our live pods into jobs. Pods of other schedulers and finished pods are not jobs, but a
    member that succeeded still counts toward its gang's minMember."""
    members: dict[str, list[PodInfo]] = {}
    succeeded: dict[str, int] = {}
    for pod in pods:
        if is_job_member(pod):
            members.setdefault(job_key(pod), []).append(pod)
        elif pod.ours and pod.phase is PodPhase.SUCCEEDED:
            succeeded[job_key(pod)] = succeeded.get(job_key(pod), 0) + 1
    return [
        build_job(
            key, group_pods, podgroups, succeeded=succeeded.get(key, 0), priority_classes=priority_classes
        )
        for key, group_pods in members.items()
    ]


def group_priority(
    pg: PodGroup, first: PodInfo, priority_classes: Mapping[str, int] | None = None
) -> tuple[int, bool]:
    """A gang's priority and whether it is preemptible: the class its PodGroup names (its value in the
    cluster's PriorityClasses, `priority_classes` name -> value, else the built-in table), else its first
    pod's; the PodGroup's `preemptibility` overrides what the value says."""
    name = pg.spec.priority_class_name
    if not (name or pg.spec.preemptibility):
        return first.priority, first.preemptible
    value = (priority_classes or {}).get(name) if name else first.priority
    return resolve_priority(name, value, pg.spec.preemptibility)


def build_job(
    key: str,
    group_pods: list[PodInfo],
    podgroups: dict[str, PodGroup],
    *,
    succeeded: int = 0,
    priority_classes: Mapping[str, int] | None = None,
) -> Job:
    """The job of `key` from its member pods (at least one). A PodGroup's priorityClassName is looked up in
    the cluster's PriorityClasses (`priority_classes`, name -> value) before the built-in table."""
    if len(group_pods) > 1:
        group_pods.sort(key=lambda p: (p.created_s, p.name))
    pg = podgroups.get(key)
    first = group_pods[0]
    if pg is not None:
        priority, preemptible = group_priority(pg, first, priority_classes)
        queue, min_member, explicit, grace = (
            pg.spec.queue,
            pg.spec.min_member,
            True,
            pg.spec.stale_grace_seconds,
        )
    else:
        if len(group_pods) == 1:  # (most jobs: a restart builds 150,000 of them)
            priority, preemptible = first.priority, first.preemptible
        else:
            priority = max(p.priority for p in group_pods)
            preemptible = all(p.preemptible for p in group_pods)
        queue = first.queue
        # A pod-group annotation without its PodGroup: all annotated pods seen so far form the gang.
        min_member = len(group_pods) if first.group else 1
        explicit, grace = first.group is None, 60.0
    topology = pg.spec.topology_constraint if pg is not None else None
    # By position, in the order of the fields (12 keywords were a tenth of the first cycle after a relist).
    return Job(
        key, queue, priority, preemptible, min_member, first.created_s, tuple(group_pods), first.group is not None,
        explicit, grace, succeeded if first.group is not None else 0,
        topology or constraint_from_annotations(first.annotations),
    )  # fmt: skip


_JOB_FIELDS = (
    "key", "queue", "priority", "preemptible", "min_member", "created_s", "members", "is_gang", "explicit_group",
    "stale_grace_s", "succeeded", "topology",
)  # fmt: skip
if tuple(f.name for f in fields(Job)) != _JOB_FIELDS:  # (a field added, removed or moved)
    raise ImportError("build_job builds Job by position: its fields are not those of _JOB_FIELDS")
