"""Jobs: the unit the actions schedule. A job is a gang (PodGroup) or a single pod."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from scheduler.api.podgroup import PodGroup
from scheduler.api.priority import resolve_priority
from scheduler.api.topology import TopologyConstraint, constraint_from_annotations
from scheduler.model import PodInfo, PodPhase
from scheduler.resources import Resources, pod_request


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
    # Where its pods must or should sit together (PodGroup spec, else the first pod's annotations).
    topology: TopologyConstraint | None = None

    @property
    def need(self) -> int:
        """How many pending members must be placed together for the gang to run."""
        return max(0, self.min_member - len(self.running))

    def pending_request(self) -> Resources:
        total = Resources()
        for p in self.pending:
            total = total + pod_request(p)
        return total

    def sort_key(self) -> tuple[int, float, str]:
        return (-self.priority, self.created_s, self.key)


def is_job_member(pod: PodInfo) -> bool:
    """Our live pods form jobs; pods of other schedulers and finished pods do not."""
    return pod.ours and pod.phase not in (PodPhase.SUCCEEDED, PodPhase.FAILED)


def job_key(pod: PodInfo) -> str:
    return pod.group or f"pod:{pod.key}"


def build_jobs(pods: Iterable[PodInfo], podgroups: dict[str, PodGroup]) -> list[Job]:
    """Group our live pods into jobs. Pods of other schedulers and finished pods are not jobs."""
    members: dict[str, list[PodInfo]] = {}
    for pod in pods:
        if not is_job_member(pod):
            continue
        members.setdefault(job_key(pod), []).append(pod)
    return [build_job(key, group_pods, podgroups) for key, group_pods in members.items()]


def build_job(key: str, group_pods: list[PodInfo], podgroups: dict[str, PodGroup]) -> Job:
    """The job of `key` from its member pods (at least one)."""
    group_pods.sort(key=lambda p: (p.created_s, p.name))
    pg = podgroups.get(key)
    first = group_pods[0]
    if pg is not None:
        priority, preemptible = (
            resolve_priority(pg.spec.priority_class_name, None, pg.spec.preemptibility)
            if pg.spec.priority_class_name or pg.spec.preemptibility
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
        stale_grace_s=grace, topology=topology or constraint_from_annotations(first.annotations),
    )  # fmt: skip
    for p in group_pods:
        (job.running if p.holds_resources else job.pending).append(p)
    return job
