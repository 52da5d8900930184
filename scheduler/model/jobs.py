"""Jobs: the unit the actions schedule. A job is a gang (PodGroup) or a single pod."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from scheduler.api.podgroup import PodGroup
from scheduler.api.priority import resolve_priority
from scheduler.api.topology import TopologyConstraint, constraint_from_annotations
from scheduler.model.resources import Resources, pod_request
from scheduler.model.types import PodInfo, PodPhase

Charge = Callable[[PodInfo], Resources]  # what a pending pod counts for its queue (see queues/charge.py)


@dataclass
class Job:
    key: str
    queue: str
    priority: int
    preemptible: bool
    min_member: int
    created_s: float
    pending: list[PodInfo] = field(default_factory=list)
    running: list[PodInfo] = field(default_factory=list)  # members holding resources
    is_gang: bool = False
    explicit_group: bool = True  # False when the PodGroup object is missing and minMember was inferred
    stale_grace_s: float = 60.0
    succeeded: int = 0  # members that finished successfully: they count toward minMember
    reserved: list[PodInfo] = field(default_factory=list)  # pipelined this cycle: placed, bound later
    # Pending members set aside because they cannot be read or their request is invalid: they stay in
    # the gang (it does not start without them, see `allocate`), told why.
    invalid: list[PodInfo] = field(default_factory=list)
    # Where its pods must or should sit together (PodGroup spec, else the first pod's annotations).
    topology: TopologyConstraint | None = None

    @property
    def need(self) -> int:
        """How many pending members must be placed together for the gang to run (members running, done
        or with a place reserved count toward minMember)."""
        return max(0, self.min_member - len(self.running) - self.succeeded - len(self.reserved))

    def pending_request(self, charge: Charge = pod_request) -> Resources:
        total = Resources()
        for p in self.pending:
            total = total + charge(p)
        return total

    def sort_key(self) -> tuple[int, int, float, str]:
        """Higher priority first; then a gang below its minMember, one at it, then elastic growth above it
        (KAI's job order); then the older job."""
        held = len(self.running) + self.succeeded
        state = 0 if held < self.min_member else (1 if held == self.min_member else 2)
        return (-self.priority, state, self.created_s, self.key)


def is_job_member(pod: PodInfo) -> bool:
    """Our live pods form jobs; pods of other schedulers, finished pods and pods being deleted do not."""
    return pod.ours and pod.phase not in (PodPhase.SUCCEEDED, PodPhase.FAILED) and not pod.terminating


def job_key(pod: PodInfo) -> str:
    return pod.group or f"pod:{pod.key}"


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
    group_pods.sort(key=lambda p: (p.created_s, p.name))
    pg = podgroups.get(key)
    first = group_pods[0]
    if pg is not None:
        name = pg.spec.priority_class_name
        # The class the PodGroup names (the cluster's, else the built-in table), else its pods' priority;
        # `preemptibility` overrides what the value says.
        value = (priority_classes or {}).get(name) if name else first.priority
        priority, preemptible = (
            resolve_priority(name, value, pg.spec.preemptibility)
            if name or pg.spec.preemptibility
            else (first.priority, first.preemptible)
        )
        queue, min_member, explicit, grace = (
            pg.spec.queue,
            pg.spec.min_member,
            True,
            pg.spec.stale_grace_seconds,
        )
    else:
        priority = max(p.priority for p in group_pods)
        preemptible = all(p.preemptible for p in group_pods)
        queue = first.queue
        # A pod-group annotation without its PodGroup: all annotated pods seen so far form the gang.
        min_member = len(group_pods) if first.group else 1
        explicit, grace = first.group is None, 60.0
    topology = pg.spec.topology_constraint if pg is not None else None
    job = Job(
        key=key, queue=queue, priority=priority, preemptible=preemptible, min_member=min_member,
        created_s=first.created_s, is_gang=first.group is not None, explicit_group=explicit,
        stale_grace_s=grace, succeeded=succeeded if first.group is not None else 0,
        topology=topology or constraint_from_annotations(first.annotations),
    )  # fmt: skip
    for p in group_pods:
        (job.running if p.holds_resources else job.pending).append(p)
    return job
