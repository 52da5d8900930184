"""The Kubernetes adapter: the `Cluster` interface of the scheduling loop over a real API server.

Informers keep watch caches of Pods, Nodes, Queues, PodGroups, GPUNodeReports, Topologies and
PriorityClasses and feed a queue that `drain_events` hands to the cycle. Before a pod event reaches the
cycle the adapter:
- drops unbound pods of other schedulers (only pods of ours and pods holding node resources matter);
- puts the pod in its PodGroup: the podgrouper derives the group from the pod's owners and keeps the
  PodGroup in step with its workload (`podgrouper/reconciler.py`); a PodGroup it writes is sent ahead of
  the pod so a gang is never seen without its minMember. Finished pods keep their group, so stale-gang
  eviction counts a member that succeeded (a pod whose group says nothing more than the pod itself gets no
  PodGroup object: it is its own job);
- fills `spec.priority` from the PriorityClass when the API server left it out;
- shows pods it is binding or bound as bound (on their node, with their assignment) until the watch catches
  up, so the cycle never sees an assumed placement undone by a stale event (which would double-allocate
  the GPU share). A pod it evicted is shown as it is: terminating (graceful deletion) until it is gone; the
  cycle keeps it releasing meanwhile, and binds the pod it made room for only then.

Binds are asynchronous (`bind_pool.AsyncBinds`): `bind` returns at once and each outcome is handed to the next
cycle by `bind_outcomes`; until the watch shows a pod bound, the bind path says where to show it.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, cast

from kubernetes import client

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import (
    GPU_ASSIGNMENT,
    GROUP,
    KAI_POD_GROUP,
    POD_GROUP,
    QUEUE_LABEL,
    SCHEDULER_NAME,
    VERSION,
)
from scheduler.api.podgroup import PodGroupStatus
from scheduler.api.priority import PRIORITY_CLASSES
from scheduler.api.queue import QueueStatus
from scheduler.cluster import BindOutcome, BindResult, EvictError, Kind, WatchEvent
from scheduler.kube.backoff import Backoff
from scheduler.kube.bind_pool import AsyncBinds
from scheduler.kube.binder import Binder
from scheduler.kube.event_queue import EventQueue, ResourceEvent
from scheduler.kube.evictor import Evictor
from scheduler.kube.informer import Informer, WatchTarget, slim
from scheduler.kube.kai_compat import KaiCompat
from scheduler.kube.lock_view import NodeLockView, only_lock_changed
from scheduler.kube.podgrouper.book import Decision, GroupBook
from scheduler.kube.podgrouper.owners import OwnerReader
from scheduler.kube.podgrouper.reconciler import PodGroupReconciler
from scheduler.kube.recorder import EventRecorder, ObjectRef
from scheduler.kube.status import PendingPodReporter, StatusPublisher
from scheduler.model import PodInfo

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_FORWARDED: tuple[Kind, ...] = ("Node", "Pod", "Queue", "PodGroup", "GPUNodeReport", "Topology")


class KubeCluster:
    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        identity: str = "tessera-scheduler",
        scheduler_name: str = SCHEDULER_NAME,
        lock_timeout_s: float = 60.0,
        event_interval_s: float = 30.0,
        watch_timeout_s: int = 300,
        backoff: Backoff | None = None,
        podgrouper: bool = True,
        bind_workers: int = 8,
        whole_gpu_lock: bool = True,
        kai_compat: bool = False,
    ) -> None:
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        sched = client.SchedulingV1Api(api_client)
        self.scheduler_name = scheduler_name
        self.events = EventQueue()
        self.recorder = EventRecorder(self.core, instance=identity, min_interval_s=event_interval_s)
        self.binder = Binder(self.core, lock_timeout_s=lock_timeout_s)
        self.evictor = Evictor(self.core, self.recorder)
        # Status writers compare with the objects' current status in the watch caches (informers below).
        self.pending = PendingPodReporter(
            self.core, self.recorder, lambda key: self.informers["Pod"].get(key)
        )
        self.podgrouper = podgrouper
        # Every cache keeps its objects slimmed (`informer.slim`): no managedFields, strings shared.
        targets = [
            WatchTarget("Node", self.core.list_node, transform=slim),
            WatchTarget("Pod", self.core.list_pod_for_all_namespaces, transform=slim),
            WatchTarget(
                "Queue", self.custom.list_cluster_custom_object, (GROUP, VERSION, "queues"), transform=slim
            ),
            WatchTarget(
                "PodGroup",
                self.custom.list_cluster_custom_object,
                (GROUP, VERSION, "podgroups"),
                transform=slim,
            ),
            WatchTarget(
                "GPUNodeReport",
                self.custom.list_cluster_custom_object,
                (GROUP, VERSION, "gpunodereports"),
                transform=slim,
            ),
            WatchTarget(
                "Topology",
                self.custom.list_cluster_custom_object,
                (GROUP, VERSION, "topologies"),
                optional=True,
                transform=slim,
            ),
            WatchTarget("PriorityClass", sched.list_priority_class, transform=slim),
        ]
        # KAI Scheduler's Queue and PodGroup kinds, translated to Tessera's (docs/kai-compat.md).
        self.kai = KaiCompat(self.custom, self.recorder) if kai_compat else None
        targets += self.kai.targets() if self.kai is not None else []
        self.informers = {
            t.kind: Informer(t, self._received, backoff=backoff or Backoff(), watch_timeout_s=watch_timeout_s)
            for t in targets
        }
        if self.kai is not None:
            self.kai.attach(self.informers)
        self.status = StatusPublisher(
            self.custom, self.informers["Queue"], self.informers["PodGroup"], self.kai
        )
        self.owners = OwnerReader(
            api_client,
            pods=self.informers["Pod"].get,
            on_change=lambda obj: self.podgroups.owner_changed(obj),
            watch_timeout_s=watch_timeout_s,
        )
        book = GroupBook(
            self.owners,
            reader=self.owners.read,
            priority_class_exists=lambda name: (
                name in PRIORITY_CLASSES or self.informers["PriorityClass"].get(name) is not None
            ),
        )
        self.podgroups = PodGroupReconciler(self.custom, book, self.informers["PodGroup"].get)
        self._priorities: dict[str, int] = {}
        # A standby replica keeps its cache warm but writes nothing: PodGroups it derives are written once it
        # leads (`writable`), and announced ahead of everything else.
        self.writable = True
        self._known_nodes: set[str] = set()  # nodes the cycle has been given
        self._parked: dict[str, dict[str, WatchEvent]] = {}  # node -> pod uid -> its latest event
        self._parked_at: dict[str, str] = {}  # pod uid -> node it is parked under
        self.locks = NodeLockView(self.informers["Node"], self.informers["Pod"], lock_timeout_s)
        # Set when something arrived that a cycle should act on soon (see `wait_for_work`).
        self._work = threading.Event()
        self.binds = AsyncBinds(
            self.binder,
            self.locks,
            node=self.informers["Node"].get,
            pod=self.informers["Pod"].get,
            events=self.events,
            wake=self._work.set,
            lock_timeout_s=lock_timeout_s,
            whole_gpu_lock=whole_gpu_lock,
            workers=bind_workers,
        )

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> KubeCluster:
        for informer in self.informers.values():
            informer.start()
        return self

    def wait_synced(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        return all(i.synced.wait(max(0.0, deadline - time.monotonic())) for i in self.informers.values())

    def stop(self) -> None:
        self.binds.stop()
        for informer in self.informers.values():
            informer.stop()
        self.owners.stop()

    def replay(self) -> None:
        """Queue every cached object as ADDED (nodes first), for a scheduler rebuilt from scratch. Events
        still queued are dropped: the caches already contain them."""
        self.events.drain()
        self._known_nodes.clear()
        self._parked.clear()
        self._parked_at.clear()
        self.locks.reset_shown()
        kai_kinds = self.kai.kinds if self.kai is not None else ()
        for kind in (
            "Node",
            "PriorityClass",
            "Queue",
            "PodGroup",
            *kai_kinds,
            "GPUNodeReport",
            "Topology",
            "Pod",
        ):
            for obj in self.informers[kind].snapshot():
                self.events.put(ResourceEvent(kind, "ADDED", obj))

    # ---- waking the loop ---------------------------------------------------------------------------------
    def _received(self, ev: ResourceEvent) -> None:
        self.events.put(ev)
        if self._wakes(ev):
            self._work.set()
        self.binds.watched(ev)

    def _wakes(self, ev: ResourceEvent) -> bool:
        """Worth a cycle soon: a pod of ours waiting for a node, a pod gone (its resources are free), a node
        added or gone. Not the echo of our own binds, nor node heartbeats or bind locks."""
        if ev.kind == "Pod":
            spec = ev.obj.get("spec") or {}
            return ev.type == "DELETED" or (
                spec.get("schedulerName") == self.scheduler_name and not spec.get("nodeName")
            )
        if ev.kind == "Node":  # a new node (a lock of ours changing is the binder's business, not a cycle's)
            return ev.type != "MODIFIED"
        return ev.kind in ("Queue", "PodGroup")

    def wake(self) -> None:
        """End a `wait_for_work` now (the loop is stopping)."""
        self._work.set()

    def wait_for_work(self, timeout_s: float) -> bool:
        """Block until something a cycle should act on arrived (a pending pod of ours, a bind outcome...) or
        `timeout_s` passed; whether there is work."""
        woke = self._work.wait(timeout_s)
        self._work.clear()
        return woke

    # ---- the Cluster interface ---------------------------------------------------------------------------
    def now(self) -> float:
        return time.time()

    def epoch_s(self) -> float:
        return time.time()

    def drain_events(self) -> list[WatchEvent]:
        out: list[WatchEvent] = []
        for ev in self.events.drain():
            try:
                self._translate(ev, out)
            except Exception as exc:  # a malformed object must not lose the other events of this drain
                log.warning("%s %s: %s; passed on unchanged", ev.kind, ev.key, exc)
                if ev.kind in _FORWARDED:
                    out.append(WatchEvent(cast(Kind, ev.kind), ev.type, ev.obj))
        out.extend(WatchEvent("Node", "MODIFIED", node) for node in self.locks.refresh())
        self.binds.release_parked()
        if self.podgrouper and self.writable:
            # Every group that changed in this drain is decided once and written, and handed to the cycle
            # ahead of everything else, so no gang is seen without its minMember.
            out[:0] = self._write_groups()
        if self.kai is not None and self.writable:
            self.kai.flush_warnings()
        return out

    def _translate(self, ev: ResourceEvent, out: list[WatchEvent]) -> None:
        """One informer event into what the cycle should see (appended to `out`)."""
        if ev.kind == "PriorityClass":
            self._on_priority_class(ev)
            out.append(WatchEvent("PriorityClass", ev.type, ev.obj))  # PodGroups name them too
        elif ev.kind == "Pod":
            for event in self._pod_events(ev):
                self._route(event, out)
        elif ev.kind == "Node":
            name = str((ev.obj.get("metadata") or {}).get("name"))
            if ev.type == "DELETED":
                self.locks.forget(name)
                self._known_nodes.discard(name)
                for uid in self._parked.pop(name, {}):
                    self._parked_at.pop(uid, None)
                out.append(WatchEvent("Node", "DELETED", ev.obj))
            elif (
                ev.type == "MODIFIED"
                and only_lock_changed(ev.old, ev.obj)
                and not self.locks.shown_tainted(name, ev.obj)
            ):
                pass  # our own bind lock came or went: the cycle's picture of the node is unchanged
            else:
                out.append(WatchEvent("Node", ev.type, self.locks.decorate(ev.obj)))
                self._known_nodes.add(name)
                for uid, parked in self._parked.pop(name, {}).items():
                    self._parked_at.pop(uid, None)
                    out.append(parked)
        elif ev.kind == "GPUNodeReport" and ev.type != "DELETED":
            # Like a bound pod, a node's report waits for its node: applied before it, it would be lost.
            self._route(WatchEvent("GPUNodeReport", ev.type, ev.obj), out)
        elif ev.kind in _FORWARDED:
            if ev.kind == "PodGroup" and self.podgrouper:  # re-created if deleted, an edit undone
                self.podgroups.podgroup_changed(ev.key, deleted=ev.type == "DELETED")
            out.append(WatchEvent(cast(Kind, ev.kind), ev.type, ev.obj))
            if self.kai is not None and ev.kind in ("Queue", "PodGroup"):
                self.kai.after_native(ev, out)
        elif self.kai is not None and ev.kind in self.kai.kinds:
            self.kai.translate(ev, out)

    def _route(self, event: WatchEvent, out: list[WatchEvent]) -> None:
        """Forward a pod's or a GPUNodeReport's event, or park it until its node has reached the cycle: a bound
        pod seen before its node could not be accounted on it (its GPU share would be given away twice), a
        report before its node would be dropped (an unhealthy GPU used). Watches arrive in any order."""
        if event.kind == "GPUNodeReport":
            uid = f"GPUNodeReport/{(event.obj.get('metadata') or {}).get('name')}"
            node = (event.obj.get("spec") or {}).get("node")
        elif event.kind == "Pod":
            uid = str((event.obj.get("metadata") or {}).get("uid", ""))
            node = (event.obj.get("spec") or {}).get("nodeName")
        else:
            out.append(event)
            return
        earlier = self._parked_at.pop(uid, None)
        if earlier is not None:
            self._parked.get(earlier, {}).pop(uid, None)
        if event.type != "DELETED" and node and node not in self._known_nodes:
            self._parked.setdefault(node, {})[uid] = event
            self._parked_at[uid] = node
            return
        out.append(event)

    def bind(self, pod: PodInfo, assignment: GPUAssignment) -> BindResult:
        return self.binds.bind(pod, assignment)

    def needs_lock(self, pod: PodInfo, node: str) -> bool:
        return self.binds.needs_lock(pod, node)

    def bind_outcomes(self) -> list[BindOutcome]:
        return self.binds.outcomes()

    def binds_in_flight(self) -> int:
        return len(self.binds)

    def evict(self, pod: PodInfo, *, action: str, message: str) -> None:
        result = self.evictor.evict(pod.namespace, pod.name, pod.uid, action, message)
        if not result.ok:
            raise EvictError(result.reason)

    def report_pending(self, pod: PodInfo, reason: str, message: str) -> None:
        if self.binds.waits_in_line(pod.uid, reason):
            return  # its turn in a node's bind lock queue, not a scheduling failure
        self.pending.unschedulable(pod.namespace, pod.name, pod.uid, message, reason=reason)

    def publish_status(self, queues: Mapping[str, QueueStatus], groups: Mapping[str, PodGroupStatus]) -> None:
        self.status.publish(queues, groups)

    def warn(self, kind: str, namespace: str | None, name: str, reason: str, message: str) -> None:
        key = f"{namespace}/{name}" if namespace else name
        obj = self.informers[kind].get(key) if kind in self.informers else None
        if obj is None and self.kai is not None:
            obj = self.kai.find(kind, key)
        self.recorder.warn(obj, kind, namespace, name, reason, message)

    # ---- pod events --------------------------------------------------------------------------------------
    def _on_priority_class(self, ev: ResourceEvent) -> None:
        name = str(ev.obj.get("metadata", {}).get("name"))
        if ev.type == "DELETED":
            self._priorities.pop(name, None)
        else:
            try:
                self._priorities[name] = int(ev.obj.get("value", 0))
            except (TypeError, ValueError):
                log.warning("PriorityClass %s has a non-integer value; ignored", name)

    def _pod_events(self, ev: ResourceEvent) -> list[WatchEvent]:
        obj = ev.obj
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        uid = str(meta.get("uid", ""))
        if ev.type == "DELETED":
            self.binds.forget(uid)
            if self.podgrouper:
                self.podgroups.forget(obj)
            self.locks.pod_gone(uid)
            self.pending.forget(uid)
            return [WatchEvent("Pod", "DELETED", obj)]
        bound_to = self.binds.shown_at(uid, bound=bool(spec.get("nodeName")))
        ours = spec.get("schedulerName") == self.scheduler_name
        if not ours and not spec.get("nodeName"):
            return []
        out: list[WatchEvent] = []
        enriched: Obj | None = None
        if bound_to is not None:  # being bound (or the watch is behind): show it where it goes
            enriched = _copy_pod(obj)
            enriched["spec"]["nodeName"] = bound_to[0]
            if bound_to[1] is not None:
                enriched["metadata"]["annotations"] = {**(enriched["metadata"].get("annotations") or {}),
                                                       GPU_ASSIGNMENT: bound_to[1]}  # fmt: skip
        if self.scheduler_name != SCHEDULER_NAME and (ours or spec.get("schedulerName") == SCHEDULER_NAME):
            # The cycle knows "ours" as the built-in name: translate a configured --scheduler-name to it.
            enriched = enriched or _copy_pod(obj)
            enriched["spec"]["schedulerName"] = SCHEDULER_NAME if ours else f"not-{SCHEDULER_NAME}"
        if "priority" not in spec and spec.get("priorityClassName") in self._priorities:
            enriched = enriched or _copy_pod(obj)
            enriched["spec"]["priority"] = self._priorities[spec["priorityClassName"]]
        decision = self._group_of(obj) if ours and self.podgrouper else None
        if decision is not None and decision.group is not None:
            enriched = enriched or _copy_pod(obj)
            enriched["metadata"].setdefault("annotations", {})[POD_GROUP] = decision.group
        elif decision is not None and (decision.queue or decision.priority_class):
            # Its own job, whose group gives it another queue or priority class (a Deployment's replica
            # is `inference`): the cycle sees them on the pod, no PodGroup object is needed.
            enriched = enriched or _copy_pod(obj)
            if decision.queue:
                enriched["metadata"]["labels"] = {**(enriched["metadata"].get("labels") or {}),
                                                  QUEUE_LABEL: decision.queue}  # fmt: skip
            if decision.priority_class:
                enriched["spec"]["priorityClassName"] = cls = decision.priority_class
                value = self._priorities.get(cls)
                if value is None and cls in PRIORITY_CLASSES:
                    value = PRIORITY_CLASSES[cls].value
                if value is not None:
                    enriched["spec"]["priority"] = value
        out.append(WatchEvent("Pod", ev.type, enriched or obj))
        return out

    def _group_of(self, pod: Obj) -> Decision | None:
        """The podgrouper's decision for the pod (None: named by the user, the cycle reads it from the pod)."""
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if annotations.get(POD_GROUP) or annotations.get(KAI_POD_GROUP):
            return None
        decision = self.podgroups.observe(pod)
        for warning in decision.warnings:
            self.recorder.record(
                ObjectRef.of(pod), "PodGrouperWarning", warning, type_="Warning", rate_limited=True
            )
        return decision

    def _write_groups(self) -> list[WatchEvent]:
        return [WatchEvent("PodGroup", t, obj) for t, obj in self.podgroups.flush()]


def _copy_pod(obj: Obj) -> Obj:
    out = dict(obj)
    out["metadata"] = copy.deepcopy(obj.get("metadata") or {})
    out["spec"] = dict(obj.get("spec") or {})
    return out
