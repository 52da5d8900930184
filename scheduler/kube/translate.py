"""Watch events into what the scheduling cycle should see.

Before an informer's event reaches the cycle (`KubeCluster.drain_events`) the translator:
- drops unbound pods of other schedulers (only pods of ours and pods holding node resources matter);
- puts the pod in its PodGroup: the podgrouper derives the group from the pod's owners and keeps the
  PodGroup in step with its workload (`podgrouper/reconciler.py`); a PodGroup it writes is sent ahead of
  the pod so a gang is never seen without its minMember. Finished pods keep their group, so stale-gang
  eviction counts a member that succeeded (a pod whose group says nothing more than the pod itself gets no
  PodGroup object: it is its own job, whose queue or priority class the group may still give);
- gives the priority of the pod's PriorityClass when the API server left `spec.priority` out;
- holds a GPUNodeReport back until its node has reached the cycle (`NodeGate`); a bound pod goes on at
  once, even before its node: the cycle holds no place for it until the node comes (the mirror's
  `awaiting_node`) but charges it to its queue, and a node deleted before a restart never comes;
- hands KAI Scheduler's kinds to `KaiCompat` (docs/kai-compat.md).
What it adds to a pod travels beside the object, typed (`PodOverlay`, applied by the parser): the object
itself is passed on as the watch has it.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from scheduler.api.keys import GPU_ALLOCATED
from scheduler.api.priority import PRIORITY_CLASSES
from scheduler.cache.cluster import Kind, WatchEvent
from scheduler.kube.event_queue import ResourceEvent
from scheduler.kube.kai_compat import KaiCompat
from scheduler.kube.podgrouper.book import Decision
from scheduler.kube.podgrouper.reconciler import PodGroupReconciler
from scheduler.kube.recorder import EventRecorder, ObjectRef
from scheduler.kube.status import PendingPodReporter
from scheduler.model.parse import pod_group_name
from scheduler.model.types import PodOverlay

log = logging.getLogger(__name__)

Obj = dict[str, Any]
FORWARDED: tuple[Kind, ...] = (
    "Node", "Pod", "Queue", "PodGroup", "GPUNodeReport", "Topology", "Namespace", "PersistentVolume",
    "PersistentVolumeClaim", "StorageClass",
)  # fmt: skip


def wakes_cycle(ev: ResourceEvent, scheduler_name: str) -> bool:
    """Worth a cycle soon: a pod of ours waiting for a node, a pod gone (its resources are free), a pod the
    device plugin has just marked allocated (its node may take the next pod), a node added or gone. Not the
    echo of our own binds, nor node heartbeats."""
    if ev.kind == "Pod":
        spec = ev.obj.get("spec") or {}
        return (
            ev.type == "DELETED"
            or (spec.get("schedulerName") == scheduler_name and not spec.get("nodeName"))
            or newly_allocated(ev)
        )
    if ev.kind == "Node":
        return ev.type != "MODIFIED"
    # a claim bound or a volume made: a pod waiting for its volumes may fit now
    return ev.kind in ("Queue", "PodGroup", "PersistentVolumeClaim", "PersistentVolume")


def newly_allocated(ev: ResourceEvent) -> bool:
    """A pod the device plugin has just marked allocated (its node may take the next pod)."""
    if ev.kind != "Pod" or ev.type != "MODIFIED":
        return False
    new = (ev.obj.get("metadata") or {}).get("annotations") or {}
    old = ((ev.old or {}).get("metadata") or {}).get("annotations") or {}
    return GPU_ALLOCATED in new and GPU_ALLOCATED not in old


class NodeGate:
    """Forwards a GPUNodeReport's event, or parks it until its node has reached the cycle: a report before its
    node would be dropped (an unhealthy GPU used). Watches arrive in any order. (A bound pod is not parked:
    one seen before its node is accounted there when the node comes, `ClusterMirror.awaiting_node`.)"""

    def __init__(self) -> None:
        self._known: set[str] = set()  # nodes the cycle has been given
        self._parked: dict[str, dict[str, WatchEvent]] = {}  # node -> report key -> its latest event
        self._parked_at: dict[str, str] = {}  # report key -> node it is parked under

    def route(self, event: WatchEvent, out: list[WatchEvent]) -> None:
        if event.kind != "GPUNodeReport":
            out.append(event)
            return
        uid = f"GPUNodeReport/{(event.obj.get('metadata') or {}).get('name')}"
        node = (event.obj.get("spec") or {}).get("node")
        earlier = self._parked_at.pop(uid, None)
        if earlier is not None:
            self._parked.get(earlier, {}).pop(uid, None)
        if event.type != "DELETED" and node and node not in self._known:
            self._parked.setdefault(node, {})[uid] = event
            self._parked_at[uid] = node
            return
        out.append(event)

    def node_seen(self, name: str, out: list[WatchEvent]) -> None:
        """The cycle was given node `name` (appended to `out` already): what waited for it follows."""
        self._known.add(name)
        for uid, parked in self._parked.pop(name, {}).items():
            self._parked_at.pop(uid, None)
            out.append(parked)

    def node_gone(self, name: str) -> None:
        self._known.discard(name)
        for uid in self._parked.pop(name, {}):
            self._parked_at.pop(uid, None)

    def reset(self) -> None:
        """The cycle's state is rebuilt from scratch: it knows no node yet."""
        self._known.clear()
        self._parked.clear()
        self._parked_at.clear()


class WatchTranslator:
    def __init__(
        self,
        *,
        scheduler_name: str,
        pending: PendingPodReporter,
        recorder: EventRecorder,
        podgroups: PodGroupReconciler | None,  # None: the podgrouper is off
        kai: KaiCompat | None,
    ) -> None:
        self.scheduler_name = scheduler_name
        self.pending, self.recorder = pending, recorder
        self.podgroups, self.kai = podgroups, kai
        self.gate = NodeGate()
        self._priorities: dict[str, int] = {}  # PriorityClass name -> value

    def translate(self, events: list[ResourceEvent]) -> list[WatchEvent]:
        out: list[WatchEvent] = []
        for ev in events:
            try:
                self._translate(ev, out)
            except Exception as exc:  # a malformed object must not lose the other events of this drain
                log.warning("%s %s: %s; passed on unchanged", ev.kind, ev.key, exc)
                if ev.kind in FORWARDED:
                    out.append(WatchEvent(cast(Kind, ev.kind), ev.type, ev.obj))
        return out

    def written_podgroups(self) -> list[WatchEvent]:
        """The PodGroups the podgrouper decided since the last call, written, as the cycle should see them."""
        if self.podgroups is None:
            return []
        return [WatchEvent("PodGroup", t, obj) for t, obj in self.podgroups.flush()]

    def reset(self) -> None:
        """The cycle's state is rebuilt from scratch (`KubeCluster.replay`)."""
        self.gate.reset()

    def _translate(self, ev: ResourceEvent, out: list[WatchEvent]) -> None:
        """One informer event into what the cycle should see (appended to `out`)."""
        if ev.kind == "PriorityClass":
            self._on_priority_class(ev)
            out.append(WatchEvent("PriorityClass", ev.type, ev.obj))  # PodGroups name them too
        elif ev.kind == "Pod":
            out.extend(self._pod_events(ev))
        elif ev.kind == "Node":
            name = str((ev.obj.get("metadata") or {}).get("name"))
            if ev.type == "DELETED":
                self.gate.node_gone(name)
                out.append(WatchEvent("Node", "DELETED", ev.obj))
            else:
                out.append(WatchEvent("Node", ev.type, ev.obj))
                self.gate.node_seen(name, out)
        elif ev.kind == "GPUNodeReport" and ev.type != "DELETED":
            # A node's report waits for its node: applied before it, it would be lost.
            self.gate.route(WatchEvent("GPUNodeReport", ev.type, ev.obj), out)
        elif ev.kind in FORWARDED:
            if ev.kind == "PodGroup" and self.podgroups is not None:  # re-created if deleted, an edit undone
                self.podgroups.podgroup_changed(ev.key, deleted=ev.type == "DELETED")
            out.append(WatchEvent(cast(Kind, ev.kind), ev.type, ev.obj))
            if self.kai is not None and ev.kind in ("Queue", "PodGroup"):
                self.kai.after_native(ev, out)
        elif self.kai is not None and ev.kind in self.kai.kinds:
            self.kai.translate(ev, out)

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
            if self.podgroups is not None:
                self.podgroups.forget(obj)
            self.pending.forget(uid)
            return [WatchEvent("Pod", "DELETED", obj)]
        ours = spec.get("schedulerName") == self.scheduler_name
        if not ours and not spec.get("nodeName"):
            return []
        group = queue = priority_class = None
        priority: int | None = None
        if "priority" not in spec and spec.get("priorityClassName") in self._priorities:
            priority = self._priorities[spec["priorityClassName"]]
        decision = self._group_of(obj) if ours and self.podgroups is not None else None
        if decision is not None and decision.group is not None:
            group = decision.group
        elif decision is not None and (decision.queue or decision.priority_class):
            # Its own job, whose group gives it another queue or priority class (a Deployment's replica
            # is `inference`): the cycle sees them with the pod, no PodGroup object is needed.
            queue = decision.queue or None
            if decision.priority_class:
                priority_class = cls = decision.priority_class
                value = self._priorities.get(cls)
                if value is None and cls in PRIORITY_CLASSES:
                    value = PRIORITY_CLASSES[cls].value
                priority = value if value is not None else spec.get("priority")
        overlay = None
        if group or queue or priority_class or priority is not None:
            overlay = PodOverlay(group=group, queue=queue, priority_class=priority_class, priority=priority)
        return [WatchEvent("Pod", ev.type, obj, overlay)]

    def _group_of(self, pod: Obj) -> Decision | None:
        """The podgrouper's decision for the pod (None: named by the user, the cycle reads it from the pod)."""
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if pod_group_name(annotations) or self.podgroups is None:
            return None
        decision = self.podgroups.observe(pod)
        for warning in decision.warnings:
            self.recorder.record(
                ObjectRef.of(pod), "PodGrouperWarning", warning, type_="Warning", rate_limited=True
            )
        return decision
