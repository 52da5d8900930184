"""The simulated cluster: Kubernetes objects in memory, a simulated clock, arrivals and completions.

Bound pods start running at once and finish after their `tessera.dev/sim-duration` (never, without one).
An evicted pod terminates as on a real cluster: it is marked for deletion (`deletionTimestamp`) and keeps
running on its GPU for its `terminationGracePeriodSeconds` (Kubernetes' default 30 s, or the shorter grace
period the eviction asks for), then it is gone and recreated as a new pending pod, as its controller (Job,
PyTorchJob, StatefulSet...) would, unless it carries `tessera.dev/sim-recreate: "false"`.
PodDisruptionBudgets (`minAvailable` or `maxUnavailable`, integers, over the pods of their namespace that
match their selector) refuse an eviction as the Eviction API does; a forced eviction deletes anyway. PriorityClasses fill in `spec.priority` of the pods that name
them, as the API server's admission does.
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
from scheduler.api.duration import parse_duration
from scheduler.api.keys import GPU_ASSIGNMENT, SIM_ARRIVAL, SIM_DURATION
from scheduler.api.podgroup import PodGroupStatus
from scheduler.api.queue import QueueStatus
from scheduler.cache.cluster import (
    BindError,
    BindOutcome,
    BindResult,
    EventType,
    EvictError,
    Kind,
    WatchEvent,
)
from scheduler.model.parse import has_controller
from scheduler.model.types import PodInfo
from scheduler.sim.loader import Manifests

SIM_RECREATE = "tessera.dev/sim-recreate"
SIM_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # simulated time 0, for creationTimestamp
DEFAULT_GRACE_S = 30.0  # Kubernetes' terminationGracePeriodSeconds default
RELIST_ORDER: tuple[Kind, ...] = (
    "Node",
    "PriorityClass",
    "Queue",
    "PodGroup",
    "GPUNodeReport",
    "Topology",
    "Pod",
)  # the Kubernetes adapter's replay order (scheduler/kube/cluster.py)


@dataclass
class PodRecord:
    obj: dict[str, Any]
    arrival_s: float
    duration_s: float | None
    started_s: float | None = None
    finished_s: float | None = None
    evictions: int = 0
    reason: tuple[str, str] | None = None
    deleting: tuple[str, str] | None = None  # (action, message) of the eviction it is terminating for


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
    _deletions: list[tuple[float, int, str, str]] = field(default_factory=list)  # (due, seq, key, uid)
    priority_classes: dict[str, int] = field(default_factory=dict)
    # The other objects as they are now (Queues, PodGroups, GPUNodeReports, ...), by kind and key: what a
    # scheduler started afresh lists (`relist`).
    objects: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # PodDisruptionBudgets by namespace/name (the scheduler does not watch them: only evictions meet them)
    budgets: dict[str, dict[str, Any]] = field(default_factory=dict)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _uid: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @classmethod
    def from_manifests(cls, manifests: Manifests) -> SimCluster:
        sim = cls(warnings=list(manifests.warnings))
        for obj in manifests.objects["Node"]:
            sim.add_object("Node", obj)
        for obj in manifests.objects["PriorityClass"]:
            value = obj.get("value")
            if isinstance(value, int) and not isinstance(value, bool):
                sim.priority_classes[obj["metadata"]["name"]] = value
            sim._emit("PriorityClass", "ADDED", obj)
        for kind in ("Queue", "PodGroup", "Topology"):
            for obj in manifests.objects.get(kind, []):
                sim._emit(kind, "ADDED", obj)
        for obj in manifests.objects.get("PodDisruptionBudget", []):
            sim.add_budget(obj)
        for obj in namespaces(manifests):
            sim._emit("Namespace", "ADDED", obj)
        volume_kinds: tuple[Kind, ...] = ("StorageClass", "PersistentVolume", "PersistentVolumeClaim")
        for kind in volume_kinds:
            for obj in manifests.objects.get(kind, []):
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
        # The kubelet's startTime: minimum runtimes are measured from it.
        started = (SIM_EPOCH + timedelta(seconds=self.now_s)).isoformat()
        rec.obj["status"] = {"phase": "Running", "startTime": started}
        rec.started_s = self.now_s
        rec.reason = None
        if rec.duration_s is not None:
            heapq.heappush(self._completions, (self.now_s + rec.duration_s, next(self._seq), pod.key))
        self._emit("Pod", "MODIFIED", rec.obj)
        return BindResult()

    def bind_outcomes(self) -> list[BindOutcome]:
        return []  # binds are synchronous

    def evict(
        self, pod: PodInfo, *, action: str, message: str, grace_s: float | None = None, force: bool = False
    ) -> None:
        """Graceful deletion: the pod is marked for deletion now and is gone after its grace period (at most
        `grace_s`). A disruption budget that allows no disruption refuses it (EvictError), unless `force`."""
        rec = self.pods.get(pod.key)
        if rec is None or rec.deleting is not None or rec.obj["metadata"].get("uid") != pod.uid:
            return
        refusal = self._budget_refuses(rec.obj)
        if refusal is not None and not force:
            raise EvictError(refusal)
        if refusal is not None:
            self.log.append({"time_s": self.now_s, "type": "BudgetOverridden", "action": action, "pod": pod.key,
                             "message": f"{refusal}; deleted anyway"})  # fmt: skip
        meta = rec.obj["metadata"]
        grace = pod_grace_s(rec.obj) if grace_s is None else min(grace_s, pod_grace_s(rec.obj))
        meta["deletionTimestamp"] = (SIM_EPOCH + timedelta(seconds=self.now_s)).isoformat()
        meta["deletionGracePeriodSeconds"] = int(grace)
        rec.deleting = (action, message)
        heapq.heappush(self._deletions, (self.now_s + grace, next(self._seq), pod.key, pod.uid))
        self._emit("Pod", "MODIFIED", rec.obj)

    def _delete(self, key: str, uid: str) -> None:
        """The end of a graceful deletion: the pod is gone, and its controller recreates it."""
        rec = self.pods.get(key)
        if rec is None or rec.deleting is None or rec.obj["metadata"].get("uid") != uid:
            return
        del self.pods[key]
        action, message = rec.deleting
        self._emit("Pod", "DELETED", rec.obj)
        self.log.append(
            {"time_s": self.now_s, "type": "Deleted", "action": action, "pod": key, "message": message}
        )
        annotations = rec.obj["metadata"].get("annotations") or {}
        if annotations.get(SIM_RECREATE, "true").lower() == "false":
            return
        fresh = copy.deepcopy(rec.obj)
        for k in ("uid", "deletionTimestamp", "deletionGracePeriodSeconds"):
            fresh["metadata"].pop(k, None)
        fresh["metadata"].get("annotations", {}).pop(GPU_ASSIGNMENT, None)
        fresh["spec"].pop("nodeName", None)
        fresh["status"] = {"phase": "Pending"}
        self._admit(fresh, arrival_s=self.now_s, duration_s=rec.duration_s, evictions=rec.evictions + 1)

    def add_budget(self, obj: dict[str, Any]) -> None:
        """A PodDisruptionBudget (policy/v1) of the simulated cluster."""
        self.budgets[_object_key({**obj, "metadata": {"namespace": "default", **obj["metadata"]}})] = obj

    def _budget_refuses(self, victim: Mapping[str, Any]) -> str | None:
        """Why a budget covering `victim` allows no disruption now (None: none does), as the disruption
        controller counts: healthy pods are running and not being deleted."""
        meta = victim["metadata"]
        labels = _labels(victim)
        for key, pdb in sorted(self.budgets.items()):
            namespace = (pdb.get("metadata") or {}).get("namespace") or "default"
            spec = pdb.get("spec") or {}
            selector = (spec.get("selector") or {}).get("matchLabels") or {}
            if namespace != meta.get("namespace") or any(labels.get(k) != v for k, v in selector.items()):
                continue
            covered = [r.obj for r in self.pods.values() if r.obj["metadata"].get("uid")
                       and r.obj["metadata"].get("namespace") == namespace
                       and not r.obj["metadata"].get("deletionTimestamp")
                       and all(_labels(r.obj).get(k) == v for k, v in selector.items())]  # fmt: skip
            healthy = sum(1 for o in covered if (o.get("status") or {}).get("phase") == "Running")
            if isinstance(spec.get("minAvailable"), int):
                allowed = healthy - spec["minAvailable"]
            elif isinstance(spec.get("maxUnavailable"), int):
                allowed = spec["maxUnavailable"] - (len(covered) - healthy)
            else:
                continue
            if allowed <= 0:
                return f"Cannot evict pod as it would violate the pod's disruption budget ({key} allows 0)"
        return None

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

    def update_object(self, kind: Kind, obj: dict[str, Any]) -> None:
        """An object changed (kubectl edit, label, a kubelet's new allocatable): a MODIFIED event. A pod
        is changed in place (`pods[key].obj`), keeping its record (arrival, duration, start)."""
        if kind == "Node":
            self.nodes[obj["metadata"]["name"]] = obj
        elif kind == "Pod":
            meta = obj["metadata"]
            rec = self.pods.get(f"{meta.get('namespace') or 'default'}/{meta['name']}")
            if rec is None or rec.obj["metadata"].get("uid") is None:
                return  # not arrived (or gone): nothing to tell
            rec.obj = obj
        self._emit(kind, "MODIFIED", obj)

    def delete_object(self, kind: Kind, obj: Mapping[str, Any]) -> None:
        """An object is deleted (a Node: its pods keep running, as after `kubectl delete node`, until the
        kubelet registers it again or the pods are deleted)."""
        if kind == "Node":
            self.nodes.pop(obj["metadata"]["name"], None)
        self._emit(kind, "DELETED", obj)

    def submit_pod(self, obj: dict[str, Any]) -> None:
        """Queue a pod for arrival at its `sim-arrival` time (default: now). The simulator plays the pods'
        controllers (it recreates an evicted pod unless `sim-recreate: "false"`), so a pod without one is
        given an owner reference saying so: the scheduler moves only pods a controller recreates."""
        meta = obj.setdefault("metadata", {})
        annotations = meta.get("annotations") or {}
        if not has_controller(meta) and str(annotations.get(SIM_RECREATE, "true")).lower() != "false":
            refs = meta.get("ownerReferences")
            stand_in = {"apiVersion": "tessera.dev/v1", "kind": "SimulatedController", "name": meta.get("name"),
                        "controller": True}  # fmt: skip
            meta["ownerReferences"] = [*(refs if isinstance(refs, list) else []), stand_in]
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
        spec = obj.setdefault("spec", {})
        if "priority" not in spec and spec.get("priorityClassName") in self.priority_classes:
            spec["priority"] = self.priority_classes[spec["priorityClassName"]]
        self.pods[key] = PodRecord(obj=obj, arrival_s=arrival_s, duration_s=duration_s, evictions=evictions)
        self.log.append({"time_s": arrival_s, "type": "Arrived", "action": "", "pod": key, "message": ""})
        self._emit("Pod", "ADDED", obj)

    def next_event_s(self) -> float | None:
        times = [h[0][0] for h in (self._arrivals, self._completions, self._deletions) if h]
        return min(times) if times else None

    def advance(self, to_s: float) -> None:
        """Move the clock, releasing arrivals, completions and the ends of graceful deletions due by then,
        in time order (at equal times: arrivals, then completions, then deletions)."""
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
            elif self._completions and self._completions[0][0] == nxt:
                _, _, key = heapq.heappop(self._completions)
                self._complete(key, nxt)
            else:
                _, _, key, uid = heapq.heappop(self._deletions)
                self._delete(key, uid)
        self.now_s = max(self.now_s, to_s)

    def _complete(self, key: str, at_s: float) -> None:
        rec = self.pods.get(key)
        if rec is None or rec.started_s is None or rec.finished_s is not None or rec.deleting is not None:
            return  # gone, or being deleted (it is killed at the end of its grace period)
        if rec.duration_s is None or rec.started_s + rec.duration_s > at_s + 1e-9:
            return  # a stale completion of an earlier incarnation
        rec.finished_s = at_s
        rec.obj["status"] = {**rec.obj.get("status", {}), "phase": "Succeeded"}
        self.log.append({"time_s": at_s, "type": "Completed", "action": "", "pod": key, "message": ""})
        self._emit("Pod", "MODIFIED", rec.obj)

    def relist(self, kinds: tuple[Kind, ...] = RELIST_ORDER) -> None:
        """What a scheduler started afresh (a restart, a failover) sees first: every object that exists now,
        as ADDED, kind by kind in `kinds`' order (the watches of a real one list in any order). Events not
        drained yet are dropped: the lists hold them."""
        self._events = []
        for kind in kinds:
            if kind == "Node":
                objs: list[Mapping[str, Any]] = list(self.nodes.values())
            elif kind == "Pod":
                objs = [r.obj for r in self.pods.values() if r.obj["metadata"].get("uid")]
            else:
                objs = list(self.objects.get(kind, {}).values())
            for obj in objs:
                self._events.append(WatchEvent(kind, "ADDED", copy.deepcopy(dict(obj))))

    def _emit(self, kind: Kind, type_: EventType, obj: Mapping[str, Any]) -> None:
        if kind not in ("Node", "Pod"):
            book = self.objects.setdefault(kind, {})
            key = _object_key(obj)
            if type_ == "DELETED":
                book.pop(key, None)
            else:
                book[key] = copy.deepcopy(dict(obj))
        self._events.append(WatchEvent(kind, type_, copy.deepcopy(dict(obj))))


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, Mapping) else {}  # unreadable labels select nothing


def _object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    return f"{meta['namespace']}/{name}" if meta.get("namespace") else name


def pod_grace_s(obj: Mapping[str, Any]) -> float:
    """A pod's terminationGracePeriodSeconds (Kubernetes' default when unset or unreadable)."""
    raw = (obj.get("spec") or {}).get("terminationGracePeriodSeconds")
    return (
        float(raw)
        if isinstance(raw, int | float) and not isinstance(raw, bool) and raw >= 0
        else DEFAULT_GRACE_S
    )


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def namespaces(manifests: Manifests) -> list[dict[str, Any]]:
    """The Namespaces of the simulated cluster: those written, and those the pods are in, each with the
    label the API server puts on every namespace (`kubernetes.io/metadata.name`), which namespace
    selectors of affinity terms may name."""
    out: dict[str, dict[str, Any]] = {}
    for obj in manifests.objects.get("Namespace", []):
        meta = obj.get("metadata") or {}
        labels = {**(meta.get("labels") or {}), NAMESPACE_NAME_LABEL: str(meta["name"])}
        out[str(meta["name"])] = {**obj, "metadata": {**meta, "labels": labels}}
    for obj in manifests.objects.get("Pod", []):
        ns = str((obj.get("metadata") or {}).get("namespace") or "default")
        if ns not in out:
            out[ns] = {"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": ns, "labels": {NAMESPACE_NAME_LABEL: ns}}}  # fmt: skip
    return list(out.values())
