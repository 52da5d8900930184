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
from scheduler.resources import Resources, placement_usage


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

    @property
    def xp(self) -> ArrayNamespace:
        return self.cache.xp

    @classmethod
    def open(cls, cache: Cache, policy: PlacementPolicy, now: float) -> Session:
        tree = QueueTree(cache.queues.values())
        jobs = build_jobs(cache.pods.values(), cache.podgroups)
        job_of = {p.uid: job for job in jobs for p in (*job.running, *job.pending)}
        allocated: dict[str, Resources] = {}
        requested: dict[str, Resources] = {}
        for uid, pl in cache.placements.items():
            job = job_of.get(uid)
            if job is None or job.queue not in tree.nodes:
                continue  # pods of other schedulers take capacity but belong to no queue
            allocated[job.queue] = allocated.get(job.queue, Resources()) + placement_usage(pl)
        for job in jobs:
            if job.queue not in tree.nodes:
                continue
            req = job.pending_request()
            requested[job.queue] = requested.get(job.queue, Resources()) + req
        for q, a in allocated.items():
            requested[q] = requested.get(q, Resources()) + a
        tree.roll_up(allocated, requested)
        compute_fair_shares(tree, cluster_capacity(cache))
        return cls(cache=cache, policy=policy, now=now, tree=tree, jobs=jobs)

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

    def charge(self, queue: str, usage: Resources, sign: int) -> None:
        """Move a queue's (and its ancestors') allocated figure as placements come and go in a cycle."""
        if queue not in self.tree.nodes:
            return
        delta = usage if sign > 0 else Resources() - usage
        for node in self.tree.ancestors(queue):
            node.allocated = node.allocated + delta


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
