"""A thin `Cluster` for benchmarks: what an API server would send, without a simulated clock.

It keeps pod objects and emits the watch events a real API server would (ADDED on create, MODIFIED
after a bind, carrying `spec.nodeName` and the assignment annotation), so the scheduler's cache,
session, allocate and commit run exactly as in production. Unlike `SimCluster` it does not deep-copy
objects (the benchmark never mutates one after handing it over) and records when each pod was bound.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT
from scheduler.api.podgroup import PodGroupStatus
from scheduler.api.queue import QueueStatus
from scheduler.cache.cluster import BindError, BindOutcome, BindResult, EvictError, Kind, WatchEvent
from scheduler.model.types import PodInfo

Obj = dict[str, Any]


@dataclass
class BenchCluster:
    nodes: dict[str, Obj] = field(default_factory=dict)
    pods: dict[str, Obj] = field(default_factory=dict)  # namespace/name
    bound_at: list[float] = field(default_factory=list)  # perf_counter() of every bind, in order
    pending_reasons: dict[str, str] = field(default_factory=dict)
    evictions: int = 0
    warnings: int = 0
    _events: list[WatchEvent] = field(default_factory=list)

    # ------------------------------------------------------------------------------ the interface
    def now(self) -> float:
        return time.monotonic()

    def drain_events(self) -> list[WatchEvent]:
        events, self._events = self._events, []
        return events

    def epoch_s(self) -> float:
        return time.time()

    def bind(self, pod: PodInfo, assignment: GPUAssignment) -> BindResult:
        obj = self.pods.get(pod.key)
        if obj is None:
            raise BindError(f"pod {pod.key} no longer exists")
        if obj["spec"].get("nodeName"):
            raise BindError(f"pod {pod.key} is already bound to {obj['spec']['nodeName']}")
        if assignment.node not in self.nodes:
            raise BindError(f"node {assignment.node} does not exist")
        # A new object, as the API server returns after an update; the old one stays untouched.
        meta = dict(obj["metadata"])
        meta["annotations"] = {**meta.get("annotations", {}), GPU_ASSIGNMENT: assignment.to_annotation()}
        bound = {**obj, "metadata": meta, "spec": {**obj["spec"], "nodeName": assignment.node},
                 "status": {"phase": "Running"}}  # fmt: skip
        self.pods[pod.key] = bound
        self.pending_reasons.pop(pod.key, None)
        self.bound_at.append(time.perf_counter())
        self._events.append(WatchEvent("Pod", "MODIFIED", bound))
        return BindResult()

    def bind_outcomes(self) -> list[BindOutcome]:
        return []  # binds are synchronous

    def evict(
        self, pod: PodInfo, *, action: str, message: str, grace_s: float | None = None, force: bool = False
    ) -> None:
        """Delete the pod; its controller recreates it at once as a new pending pod (new uid)."""
        obj = self.pods.pop(pod.key, None)
        if obj is None:
            raise EvictError(f"pod {pod.key} no longer exists")
        self.evictions += 1
        self._events.append(WatchEvent("Pod", "DELETED", obj))
        meta = dict(obj["metadata"])
        meta["uid"] = f"{meta.get('uid', pod.key)}-r{self.evictions}"
        meta["annotations"] = {k: v for k, v in meta.get("annotations", {}).items() if k != GPU_ASSIGNMENT}
        spec = {k: v for k, v in obj["spec"].items() if k != "nodeName"}
        self.create("Pod", {**obj, "metadata": meta, "spec": spec, "status": {"phase": "Pending"}})

    def report_pending(self, pod: PodInfo, reason: str, message: str) -> None:
        self.pending_reasons[pod.key] = f"{reason}: {message}"

    def publish_status(self, queues: Mapping[str, QueueStatus], groups: Mapping[str, PodGroupStatus]) -> None:
        return None

    def warn(self, kind: str, namespace: str | None, name: str, reason: str, message: str) -> None:
        self.warnings += 1  # the benchmark's objects are well-formed; a count shows if that changes

    # ------------------------------------------------------------------------------------ world
    def create(self, kind: Kind, obj: Obj) -> None:
        meta = obj["metadata"]
        if kind == "Node":
            self.nodes[meta["name"]] = obj
        elif kind == "Pod":
            self.pods[f"{meta.get('namespace') or 'default'}/{meta['name']}"] = obj
        self._events.append(WatchEvent(kind, "ADDED", obj))

    def update_node(self, obj: Obj) -> None:
        self.nodes[obj["metadata"]["name"]] = obj
        self._events.append(WatchEvent("Node", "MODIFIED", obj))

    def delete_pod(self, key: str) -> None:
        obj = self.pods.pop(key, None)
        if obj is not None:
            self._events.append(WatchEvent("Pod", "DELETED", obj))

    @property
    def bound(self) -> int:
        return len(self.bound_at)
