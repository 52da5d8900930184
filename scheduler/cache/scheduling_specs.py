"""The objects that shape scheduling but hold nothing: Queues, PodGroups, Topologies, PriorityClasses.

The mirror (`mirror.py`) hands their watch events here; pods and nodes stay its own. Each kind is kept by
name as the last version that could be used: a Queue or PodGroup update that fails validation is reported
(`Problems`) and the last valid spec stays, so running pods stay charged where they were and pending ones
stay schedulable as they were. Every change is told to the job index, which rebuilds the jobs it touches.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.api.podgroup import PodGroup
from scheduler.api.queue import Queue
from scheduler.api.topology import Topology
from scheduler.cache.cluster import WatchEvent
from scheduler.cache.containment import object_name
from scheduler.cache.error_log import Problems
from scheduler.cache.job_index import JobIndex
from scheduler.state.cluster_state import ClusterState

SPEC_KINDS = frozenset({"Queue", "PodGroup", "Topology", "PriorityClass"})


class SchedulingSpecs:
    def __init__(self, state: ClusterState, problems: Problems) -> None:
        self.state = state
        self.problems = problems
        self.queues: dict[str, Queue] = {}
        self.podgroups: dict[str, PodGroup] = {}  # namespace/name
        self.topologies: dict[str, Topology] = {}  # their levels are columns of the state's `domain`
        self.priority_classes: dict[str, int] = {}  # the cluster's PriorityClasses: name -> value

    def apply(self, ev: WatchEvent, index: JobIndex) -> None:
        """One event of a kind in `SPEC_KINDS`; raises on an object that cannot be used (see `unusable`)."""
        if ev.kind == "Queue":
            self._on_queue(ev, index)
        elif ev.kind == "PodGroup":
            self._on_podgroup(ev, index)
        elif ev.kind == "Topology":
            self._on_topology(ev)
        elif ev.kind == "PriorityClass":
            self._on_priority_class(ev, index)

    def unusable(self, ev: WatchEvent, name: str, reason: str, index: JobIndex) -> None:
        """Mark the object of `ev` that could not be used: an invalid queue or pod group is reported, and
        its pods are told why (or keep their last valid spec)."""
        if ev.type == "DELETED":
            return
        if ev.kind == "Queue":
            self.problems.queues[name] = f"queue {name} is invalid: {reason}"
            index.touch_queue(name)  # its pods are told why (or keep their last valid spec)
        elif ev.kind == "PodGroup":
            meta = ev.obj.get("metadata") if isinstance(ev.obj, Mapping) else None
            ns = meta.get("namespace") if isinstance(meta, Mapping) else None
            key = f"{ns if isinstance(ns, str) and ns else 'default'}/{name}"
            self.problems.podgroups[key] = f"PodGroup {key} is invalid: {reason}"
            index.touch(key)

    def _on_queue(self, ev: WatchEvent, index: JobIndex) -> None:
        """A Queue that fails validation is reported (`problems.queues`) and keeps its last valid spec, if
        it had one: its running pods stay charged to it, and its pods stay schedulable as they were."""
        if ev.type == "DELETED":
            name = object_name(ev.obj)
            self.queues.pop(name, None)
            self.problems.queues.pop(name, None)
            index.touch_queue(name)  # its running pods are charged to `default` from now on
            return
        q = Queue.model_validate(ev.obj)
        self.queues[q.name] = q
        self.problems.queues.pop(q.name, None)
        index.touch_queue(q.name)

    def _on_topology(self, ev: WatchEvent) -> None:
        if ev.type == "DELETED":
            name = str((ev.obj.get("metadata") or {}).get("name", ""))
            self.topologies.pop(name, None)
        else:
            t = Topology.model_validate(ev.obj)
            self.topologies[t.name] = t
        self.state.set_topologies({name: t.label_keys for name, t in self.topologies.items()})

    def _on_podgroup(self, ev: WatchEvent, index: JobIndex) -> None:
        """Like queues: an invalid PodGroup update keeps the last valid one; a new invalid one leaves its
        pods out of scheduling, told why (`JobIndex`)."""
        if ev.type == "DELETED":
            meta = ev.obj.get("metadata") or {}
            key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
            self.podgroups.pop(key, None)
            self.problems.podgroups.pop(key, None)
            index.touch(key)
            return
        g = PodGroup.model_validate(ev.obj)
        key = f"{g.metadata.namespace or 'default'}/{g.metadata.name}"
        index.touch(key)
        self.podgroups[key] = g
        self.problems.podgroups.pop(key, None)

    def _on_priority_class(self, ev: WatchEvent, index: JobIndex) -> None:
        name = str((ev.obj.get("metadata") or {}).get("name", ""))
        value = ev.obj.get("value")
        if ev.type == "DELETED":
            self.priority_classes.pop(name, None)
        elif isinstance(value, int) and not isinstance(value, bool):
            self.priority_classes[name] = value
        else:
            raise ValueError(f"value {value!r} is not an integer")
        index.touch_all()  # a PodGroup naming it may now have another priority
