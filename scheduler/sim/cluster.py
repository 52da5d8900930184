"""The simulated cluster: Kubernetes objects in memory, a simulated clock, arrivals and completions.

Bound pods start running at once and finish after their `tessera.dev/sim-duration` (never, without one).
An evicted pod is recreated as a new pending pod, as its controller (Job, PyTorchJob...) would, unless
it carries `tessera.dev/sim-recreate: "false"`.
"""

from __future__ import annotations

import copy
import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT, SIM_ARRIVAL, SIM_DURATION
from scheduler.api.podgroup import PodGroupStatus
from scheduler.api.queue import QueueStatus
from scheduler.cluster import BindError, BindOutcome, BindResult, EventType, Kind, WatchEvent
from scheduler.model import PodInfo
from scheduler.sim.duration import parse_duration
from scheduler.sim.loader import Manifests

SIM_RECREATE = "tessera.dev/sim-recreate"
SIM_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # simulated time 0, for creationTimestamp


@dataclass
class PodRecord:
    obj: dict[str, Any]
    arrival_s: float
    duration_s: float | None
    started_s: float | None = None
    finished_s: float | None = None
    evictions: int = 0
    reason: tuple[str, str] | None = None


@dataclass
class SimCluster:
    now_s: float = 0.0
    pods: dict[str, PodRecord] = field(default_factory=dict)  # namespace/name
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    queue_status: dict[str, QueueStatus] = field(default_factory=dict)
    group_status: dict[str, PodGroupStatus] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)  # arrivals, completions (scheduler events aside)
    _events: list[WatchEvent] = field(default_factory=list)
    _arrivals: list[tuple[float, int, str]] = field(default_factory=list)
    _completions: list[tuple[float, int, str]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _uid: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @classmethod
    def from_manifests(cls, manifests: Manifests) -> SimCluster:
        sim = cls(warnings=list(manifests.warnings))
        for obj in manifests.objects["Node"]:
            sim.add_object("Node", obj)
        for kind in ("Queue", "PodGroup"):
            for obj in manifests.objects[kind]:
                sim._emit(kind, "ADDED", obj)
        for obj in manifests.objects["Pod"]:
            sim.submit_pod(obj)
        return sim

    # ------------------------------------------------------------------------------ the interface
    def now(self) -> float:
        return self.now_s

    def drain_events(self) -> list[WatchEvent]:
        events, self._events = self._events, []
        return events

    def epoch_s(self) -> float:
        return SIM_EPOCH.timestamp() + self.now_s

    def bind(self, pod: PodInfo, assignment: GPUAssignment) -> BindResult:
        rec = self.pods.get(pod.key)
        if rec is None or rec.obj["metadata"].get("uid") != pod.uid:
            raise BindError(f"pod {pod.key} no longer exists")
        spec = rec.obj.setdefault("spec", {})
        if spec.get("nodeName"):
            raise BindError(f"pod {pod.key} is already bound to {spec['nodeName']}")
        if assignment.node not in self.nodes:
            raise BindError(f"node {assignment.node} does not exist")
        spec["nodeName"] = assignment.node
        rec.obj["metadata"].setdefault("annotations", {})[GPU_ASSIGNMENT] = assignment.to_annotation()
        rec.obj["status"] = {"phase": "Running"}
        rec.started_s = self.now_s
        rec.reason = None
        if rec.duration_s is not None:
            heapq.heappush(self._completions, (self.now_s + rec.duration_s, next(self._seq), pod.key))
        self._emit("Pod", "MODIFIED", rec.obj)
        return BindResult()

    def bind_outcomes(self) -> list[BindOutcome]:
        return []  # binds are synchronous

    def evict(self, pod: PodInfo, *, action: str, message: str) -> None:
        rec = self.pods.pop(pod.key, None)
        if rec is None:
            return
        self._emit("Pod", "DELETED", rec.obj)
        self.log.append(
            {"time_s": self.now_s, "type": "Deleted", "action": action, "pod": pod.key, "message": message}
        )
        annotations = rec.obj["metadata"].get("annotations") or {}
        if annotations.get(SIM_RECREATE, "true").lower() == "false":
            return
        fresh = copy.deepcopy(rec.obj)
        fresh["metadata"].pop("uid", None)
        fresh["metadata"].get("annotations", {}).pop(GPU_ASSIGNMENT, None)
        fresh["spec"].pop("nodeName", None)
        fresh["status"] = {"phase": "Pending"}
        self._admit(fresh, arrival_s=self.now_s, duration_s=rec.duration_s, evictions=rec.evictions + 1)

    def report_pending(self, pod: PodInfo, reason: str, message: str) -> None:
        rec = self.pods.get(pod.key)
        if rec is not None:
            rec.reason = (reason, message)

    def publish_status(self, queues: Mapping[str, QueueStatus], groups: Mapping[str, PodGroupStatus]) -> None:
        self.queue_status = dict(queues)
        self.group_status = dict(groups)

    def warn(self, kind: str, namespace: str | None, name: str, reason: str, message: str) -> None:
        if message not in self.warnings:  # one line per problem, however many pods share it
            self.warnings.append(message)

    # ------------------------------------------------------------------------------------- world
    def add_object(self, kind: Kind, obj: dict[str, Any]) -> None:
        if kind == "Node":
            self.nodes[obj["metadata"]["name"]] = obj
        self._emit(kind, "ADDED", obj)

    def submit_pod(self, obj: dict[str, Any]) -> None:
        """Queue a pod for arrival at its `sim-arrival` time (default: now)."""
        meta = obj.setdefault("metadata", {})
        annotations = meta.get("annotations") or {}
        name = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        try:
            arrival = self.now_s + parse_duration(annotations.get(SIM_ARRIVAL, 0))
            raw_duration = annotations.get(SIM_DURATION)
            duration = parse_duration(raw_duration) if raw_duration is not None else None
        except ValueError as exc:
            self.warnings.append(f"pod {name}: {exc}; arrives now and runs until the end")
            arrival, duration = self.now_s, None
        heapq.heappush(self._arrivals, (arrival, next(self._seq), name))
        self.pods[name] = PodRecord(obj=obj, arrival_s=arrival, duration_s=duration)

    def _admit(
        self, obj: dict[str, Any], *, arrival_s: float, duration_s: float | None, evictions: int
    ) -> None:
        meta = obj["metadata"]
        meta.setdefault("namespace", "default")
        meta["uid"] = f"sim-{next(self._uid):06d}"
        meta["creationTimestamp"] = (SIM_EPOCH + timedelta(seconds=arrival_s)).isoformat()
        key = f"{meta['namespace']}/{meta['name']}"
        obj.setdefault("status", {"phase": "Pending"})
        self.pods[key] = PodRecord(obj=obj, arrival_s=arrival_s, duration_s=duration_s, evictions=evictions)
        self.log.append({"time_s": arrival_s, "type": "Arrived", "action": "", "pod": key, "message": ""})
        self._emit("Pod", "ADDED", obj)

    def next_event_s(self) -> float | None:
        times = [h[0][0] for h in (self._arrivals, self._completions) if h]
        return min(times) if times else None

    def advance(self, to_s: float) -> None:
        """Move the clock, releasing arrivals and completions due by then, in time order."""
        while True:
            nxt = self.next_event_s()
            if nxt is None or nxt > to_s:
                break
            self.now_s = max(self.now_s, nxt)
            if self._arrivals and self._arrivals[0][0] == nxt:
                _, _, key = heapq.heappop(self._arrivals)
                rec = self.pods[key]
                if rec.obj["metadata"].get("uid") is None:
                    self._admit(rec.obj, arrival_s=rec.arrival_s, duration_s=rec.duration_s, evictions=0)
            else:
                _, _, key = heapq.heappop(self._completions)
                rec_or_none = self.pods.get(key)
                if rec_or_none is None or rec_or_none.started_s is None or rec_or_none.finished_s is not None:
                    continue
                if (
                    rec_or_none.duration_s is None
                    or rec_or_none.started_s + rec_or_none.duration_s > nxt + 1e-9
                ):
                    continue  # a stale completion of an earlier incarnation
                rec_or_none.finished_s = nxt
                rec_or_none.obj["status"] = {"phase": "Succeeded"}
                self.log.append({"time_s": nxt, "type": "Completed", "action": "", "pod": key, "message": ""})
                self._emit("Pod", "MODIFIED", rec_or_none.obj)
        self.now_s = max(self.now_s, to_s)

    @property
    def pending_arrivals(self) -> int:
        return len(self._arrivals)

    def _emit(self, kind: Kind, type_: EventType, obj: Mapping[str, Any]) -> None:
        self._events.append(WatchEvent(kind, type_, copy.deepcopy(dict(obj))))
