"""One scheduling cycle's working set: cache, queue tree with fair shares, jobs, reasons, events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.backend import ArrayNamespace
from scheduler.cache import Cache
from scheduler.jobs import Job, build_jobs
from scheduler.model import PodInfo
from scheduler.placement.policy import PlacementPolicy
from scheduler.queues import QueueTree, compute_fair_shares
from scheduler.reservations import match_reservations
from scheduler.resources import Resources, placement_usage, pod_request


@dataclass
class PendingReason:
    reason: str  # short CamelCase code, as a Kubernetes condition reason
    message: str


@dataclass
class Session:
    cache: Cache
    policy: PlacementPolicy
    now: float
    tree: QueueTree
    jobs: list[Job]
    reasons: dict[str, PendingReason] = field(default_factory=dict)  # by pod uid
    events: list[dict[str, Any]] = field(default_factory=list)
    reserved: dict[str, str] = field(default_factory=dict)  # pending pod uid -> reservation it takes
    nonpreemptible: set[str] = field(default_factory=set)  # uids of pods of non-preemptible jobs
    memo: dict[Any, Any] = field(default_factory=dict)  # per-cycle results the actions share
    group_reasons: dict[str, PendingReason] = field(default_factory=dict)  # gangs with no pending pod

    @property
    def xp(self) -> ArrayNamespace:
        return self.cache.xp

    @classmethod
    def open(cls, cache: Cache, policy: PlacementPolicy, now: float) -> Session:
        tree = QueueTree(cache.queues.values())
        jobs = build_jobs(cache.pods.values(), cache.podgroups)
        job_of = {p.uid: job for job in jobs for p in (*job.running, *job.pending)}
        allocated: dict[str, Resources] = {}
        allocated_np: dict[str, Resources] = {}
        requested: dict[str, Resources] = {}
        nonpreemptible = {uid for uid, job in job_of.items() if not job.preemptible}
        for uid, pl in cache.placements.items():
            job = job_of.get(uid)
            if job is None or job.queue not in tree.nodes:
                continue  # pods of other schedulers take capacity but belong to no queue
            allocated[job.queue] = allocated.get(job.queue, Resources()) + placement_usage(pl)
            if uid in nonpreemptible:
                allocated_np[job.queue] = allocated_np.get(job.queue, Resources()) + placement_usage(pl)
        for res in cache.reservations.values():  # a moving pod keeps counting where it is going
            if res.queue in tree.nodes:
                allocated[res.queue] = allocated.get(res.queue, Resources()) + placement_usage(res.placement)
        reserved = match_reservations(cache.reservations, (p for job in jobs for p in job.pending))
        for job in jobs:
            if job.queue not in tree.nodes:
                continue
            req = job.pending_request()
            for p in job.pending:
                if p.uid in reserved:  # already counted through its reservation
                    req = req - pod_request(p)
            requested[job.queue] = requested.get(job.queue, Resources()) + req
        for q, a in allocated.items():
            requested[q] = requested.get(q, Resources()) + a
        tree.roll_up(allocated, requested, allocated_np)
        compute_fair_shares(tree, cluster_capacity(cache))
        return cls(
            cache=cache, policy=policy, now=now, tree=tree, jobs=jobs, reserved=reserved,
            nonpreemptible=nonpreemptible,
        )  # fmt: skip

    def set_reason(self, pod: PodInfo, reason: str, message: str) -> None:
        self.reasons[pod.uid] = PendingReason(reason, message)

    def event(self, type_: str, action: str, pod: PodInfo, message: str = "", **extra: Any) -> None:
        self.events.append(
            {
                "time_s": round(self.now, 3),
                "type": type_,
                "action": action,
                "pod": pod.key,
                "message": message,
            }
            | extra
        )

    def charge(self, queue: str, usage: Resources, sign: int, pod: PodInfo | None = None) -> None:
        """Move a queue's (and its ancestors') allocated figure as placements come and go in a cycle."""
        if queue not in self.tree.nodes:
            return
        delta = usage if sign > 0 else Resources() - usage
        np = pod is not None and pod.uid in self.nonpreemptible
        for node in self.tree.ancestors(queue):
            node.allocated = node.allocated + delta
            if np:
                node.allocated_np = node.allocated_np + delta


def cluster_capacity(cache: Cache) -> Resources:
    s = cache.state
    xp = s.xp
    live = xp.astype(s.valid, xp.int64)
    gpus = int(xp.sum(xp.astype(s.present & s.healthy, xp.int64) * live[:, None]))
    return Resources(
        gpu=float(gpus),
        cpu=float(xp.sum(s.total_cpu * live)),
        memory=float(xp.sum(s.total_mem * live)),
    )
