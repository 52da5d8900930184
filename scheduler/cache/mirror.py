"""The scheduler's mirror of the cluster, kept current from watch events.

Nodes live in the `ClusterState` arrays, pods in a dict; queues, pod groups, topologies and priority
classes in `SchedulingSpecs` (`scheduling_specs.py`). A pod holding resources is accounted in the ledger
exactly once: from its `tessera.dev/gpu-assignment` when it has one (ours, so a restarted scheduler
rebuilds the same picture), else from the GPUs Tessera's device plugin recorded it got
(`tessera.dev/gpu-allocated`, pods of other schedulers), else whole GPUs taken on its node's free slots
(until the plugin says which; or for good where NVIDIA's plugin serves them). Every pod change is told to
the job index and the hand-off (`handoff.py`: pods waiting for the device plugin); the echo of our own bind
is applied in place (`bind_echo.py`). A version of a pod that shows it unbound while the ledger holds it on
a node is older than our bind (a bound pod never loses its node): the pod keeps its place.

Each watch event is handled on its own (containment boundary 1, see `scheduler/cache/containment.py`): an
object that cannot be used is marked and reported, never allowed to stop the events after it. Nodes change
under running pods: a Node deleted while its pods run (kubectl delete node, the kubelet registers it again)
keeps its row, unschedulable, until it is back or its pods are gone; a GPU that leaves a node's count while
pods hold it is kept, draining (`ClusterState.draining`). The arrays always equal what the pods hold.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from scheduler.api.assignment import AdmissionReading
from scheduler.api.keys import GPU_ASSIGNMENT, SCHEDULER_NAME
from scheduler.cache.accounting import (
    Unaccountable,
    from_allocation,
    from_assignment,
    from_request,
    sized,
    unsized,
    whole_gpus_taken,
    without_gpus,
)
from scheduler.cache.bind_echo import bind_echo
from scheduler.cache.cluster import WatchEvent
from scheduler.cache.containment import failure, object_name, one_line
from scheduler.cache.error_log import ErrorLog, Problems
from scheduler.cache.gpu_identity import GPUIdentities
from scheduler.cache.handoff import Handoff, HandoffRule
from scheduler.cache.job_index import JobIndex, admitted_with
from scheduler.cache.ledger import Holding, HoldKind, Ledger, Owner
from scheduler.cache.pod_topology import PodTopology
from scheduler.cache.scheduling_specs import SPEC_KINDS, SchedulingSpecs
from scheduler.cache.volumes import VOLUME_KINDS, VolumeCatalog
from scheduler.model.jobs import job_key
from scheduler.model.parse import InvalidObject, invalid_pod, parse_node, parse_pod
from scheduler.model.types import Placement, PodInfo, PodPhase
from scheduler.state.cluster_state import OvercommitError

log = logging.getLogger(__name__)


_EXPECTED = (InvalidObject, ValidationError, ValueError)  # bad input; anything else is a bug of ours


class ClusterMirror:
    def __init__(
        self,
        ledger: Ledger,
        errors: ErrorLog,
        *,
        scheduler_name: str = SCHEDULER_NAME,
        handoff: HandoffRule | None = None,
    ) -> None:
        self.ledger = ledger
        self.scheduler_name = scheduler_name
        # Pods bound and waiting for the device plugin's Allocate (one per node; none in a simulation).
        self.handoff = Handoff(ledger, handoff)
        self.state = ledger.state
        self.errors = errors
        self.pods: dict[str, PodInfo] = {}  # by uid
        self.problems = Problems()
        # Queues, PodGroups, Topologies and PriorityClasses: scheduling_specs.py keeps them.
        self.specs = specs = SchedulingSpecs(self.state, self.problems)
        self.index = JobIndex(
            ledger, specs.podgroups, specs.queues, self.problems.podgroups, specs.priority_classes
        )
        # Each node's GPU UUIDs, memory and health, from its GPUNodeReport (the agent is their one source).
        self.gpu_identities = GPUIdentities()
        # Nodes deleted while pods still hold resources there: kept, unschedulable, until back or empty.
        self.gone: set[str] = set()
        # Pods bound to a node the mirror has not seen yet, by node name.
        self.awaiting_node: dict[str, set[str]] = {}
        # Placements read from assignments during `apply`, by uid (the pod's version is the one in `pods`
        # until they are held: a later event of it holds them first), written to the arrays in one go
        # (see _flush).
        self._deferred: dict[str, Placement] = {}
        # Running pods holding GPU shares whose MiB are not known yet (their node's GPU memory is still to
        # come, from its GPUNodeReport), by node name: filled in when it comes (`_size`).
        self.unsized: dict[str, set[str]] = {}
        # Running pods whose GPUs could not be charged (an assignment that cannot be read or over-commits
        # its GPU, too few free GPUs for a pod of another scheduler), with the GPU slots they occupy (None:
        # unknown, all of the node's). Those GPUs take no new pod until every pod there is charged; tried
        # again after every batch of events (`_recharge`).
        self.uncharged: dict[str, tuple[PodInfo, frozenset[int] | None]] = {}
        self._told_uncharged: dict[str, frozenset[int] | None] = {}  # each told once, not at every retry
        # namespace -> name -> uid of the pods above (by their own namespace and name strings: a map keyed by
        # "namespace/name" made a new string a pod, 9 MiB of a relist)
        self.uids: dict[str, dict[str, str]] = {}
        self.namespaces: dict[str, dict[str, str]] = {}  # namespace -> its labels (namespace selectors)
        # Where pods are, as inter-pod affinity and spread count them: told of every holding change.
        self.pod_topology = PodTopology(self.state, self.pod_for, self.namespaces)
        ledger.add_pod_listener(self.pod_topology)
        self.volumes = VolumeCatalog(self.state)  # PersistentVolumes, claims, StorageClasses
        self._max_mem: int | None = None
        self._max_mem_key = -1

    def apply(self, events: list[WatchEvent]) -> None:
        pods: list[WatchEvent] = []  # consecutive pod events, taken together (`_on_pods`)
        for ev in events:
            if ev.kind == "Pod":
                pods.append(ev)
                continue
            if pods:
                self._on_pods(pods)
                pods = []
            try:
                self._flush()
                if ev.kind == "Node":
                    self._on_node(ev)
                elif ev.kind == "GPUNodeReport":
                    self._on_gpunodereport(ev)
                elif ev.kind == "Namespace":
                    self._on_namespace(ev)
                elif ev.kind in VOLUME_KINDS:
                    self.volumes.apply(ev)
                elif ev.kind in SPEC_KINDS:
                    self.specs.apply(ev, self.index)
            except (
                Exception
            ) as exc:  # one object, whatever went wrong with it: see scheduler/cache/containment.py
                self._unusable(ev, exc)
        if pods:
            self._on_pods(pods)
        try:
            self._flush()
            if self.uncharged or self.state.blocked:
                self._recharge()
            if self.gone:
                self._drop_empty_gone()
            if self.state.draining:
                self.state.retire_drained()
        except Exception as exc:
            log.exception("accounting the last watch events failed")
            self.errors.add(f"accounting watch events: {failure(exc)}")

    def _unusable(self, ev: WatchEvent, exc: Exception) -> None:
        """Mark the object of `ev`, which could not be handled: an invalid pod, a node that takes no pod,
        an invalid queue or pod group; a report is only logged."""
        name = object_name(ev.obj)
        if isinstance(exc, _EXPECTED):
            reason = one_line(exc)
            log.warning("%s %s cannot be used: %s", ev.kind, name, reason)
        else:
            reason = f"the scheduler failed on it ({failure(exc)})"
            log.exception("handling %s %s %s failed", ev.type, ev.kind, name)
        self.errors.add(f"{ev.kind} {name}: {reason}")
        try:
            if ev.kind == "Pod":
                self._invalid_pod(ev, reason)
            elif ev.kind == "Node" and ev.type != "DELETED":
                self._unusable_node(name, reason)
            elif ev.kind in SPEC_KINDS:
                self.specs.unusable(ev, name, reason, self.index)
            elif ev.kind in VOLUME_KINDS:
                ns = (ev.obj.get("metadata") or {}).get("namespace") or "default"
                self.volumes.forget(ev.kind, f"{ns}/{name}" if ev.kind == "PersistentVolumeClaim" else name)
        except Exception:
            log.exception("marking %s %s as unusable failed", ev.kind, name)

    def _flush(self) -> None:
        """Hold the deferred placements: in bulk, or one by one (with per-pod errors) if the bulk
        update refuses because one of them does not fit."""
        if not self._deferred:
            return
        deferred, self._deferred = self._deferred, {}
        try:
            self.ledger.hold_many(deferred)
        except OvercommitError:
            for uid, pl in deferred.items():
                try:
                    self.ledger.hold(uid, pl)
                except OvercommitError as exc:
                    pod = self.pods[uid]
                    self._uncharged(pod, pl, f"pod {pod.key}: {exc}")
                else:
                    self._held(uid, pl)
        else:
            self._held_many(deferred)
        if self.handoff.rule is not None:
            for uid in deferred:
                self.handoff.refresh(self.pods.get(uid), uid)

    # ----------------------------------------------------------------------------------------- nodes
    def _on_node(self, ev: WatchEvent) -> None:
        name = object_name(ev.obj)
        if ev.type == "DELETED":
            self._node_deleted(name)
            return
        node = self.gpu_identities.complete(parse_node(ev.obj))
        self.problems.nodes.pop(node.name, None)
        self.gone.discard(node.name)  # registered again: its rows and what its pods hold are kept
        row = self.state.row_of(node.name)
        draining = set(self.state.draining.get(row, ())) if row is not None else set()
        memory = self._gpu_memory(node.name)
        row = self.state.add_node(node)
        for slot in sorted(self.state.draining.get(row, set()) - draining):
            self.errors.add(
                f"node {node.name}: GPU {slot} left its allocatable while pods hold it; it takes no new pod "
                "and is retired once they are gone"
            )
        self.gpu_identities.measure(self.state, node.name)
        # Watches arrive in any order: pods bound here before we knew the node are accounted now.
        for uid in sorted(self.awaiting_node.pop(node.name, set())):
            pod = self.pods.get(uid)
            if pod is not None and pod.holds_resources and pod.node == node.name and uid not in self.ledger:
                self._account_found(pod)
        self._size(node.name, memory_changed=memory != self._gpu_memory(node.name))

    def _node_deleted(self, name: str) -> None:
        """The Node object is gone. Its pods may still run (kubectl delete node; the kubelet registers it
        again, or the pod garbage collector deletes them): while any holds resources there the row stays,
        unschedulable, with what they hold, so a node that comes back is not taken for an empty one."""
        self.problems.nodes.pop(name, None)
        row = self.state.row_of(name)
        if row is None:
            return
        for key in [k for k, h in self.ledger.reserved.items() if h.placement.node == row]:
            self.ledger.unreserve(key)  # a moved pod cannot go there any more
        self.gpu_identities.forget(name)
        node = self.state.nodes[row]
        if node is not None and row in self._occupied_rows():
            self.gone.add(name)
            self._mask(name)
            return
        self.gone.discard(name)
        self._remove_row(name, row)

    def _occupied_rows(self) -> set[int]:
        """Rows where a pod still is: bound, or evicted and still terminating (RELEASING)."""
        held = (*self.ledger.pods.values(), *self.ledger.releasing.values())
        return {h.placement.node for h in held}

    def _remove_row(self, name: str, row: int) -> None:
        self.handoff.forget_row(row)
        for uid in self.ledger.forget_row(row):  # nothing bound is left; reserved places and releasing pods
            if (gone := self.pods.get(uid)) is not None:
                self.index.touch(job_key(gone))
        self.state.remove_node(name)

    def _drop_empty_gone(self) -> None:
        rows = self._occupied_rows()
        for name in sorted(self.gone):
            row = self.state.row_of(name)
            self.gone.discard(name)
            if row is not None and row in rows:
                self.gone.add(name)
            elif row is not None:
                self._remove_row(name, row)

    def _unusable_node(self, name: str, reason: str) -> None:
        """A node Tessera cannot read takes no pod (what runs there stays accounted) until it is fixed."""
        self.problems.nodes[name] = (
            f"node {name} is unschedulable for Tessera: {reason}; pods running there keep their GPUs"
        )
        self._mask(name)

    def _mask(self, name: str) -> None:
        """Node `name` takes no new pod; what runs there stays accounted."""
        row = self.state.row_of(name)
        node = self.state.nodes[row] if row is not None else None
        if node is not None and node.usable:
            self.state.update_node(replace(node, usable=False))

    def _on_gpunodereport(self, ev: WatchEvent) -> None:
        node = (ev.obj.get("spec") or {}).get("node")
        memory = self._gpu_memory(node) if isinstance(node, str) else None
        name = self.gpu_identities.on_report(self.state, ev.type, ev.obj)
        for bad in self.problems.nodes:  # a report rewrites its node from the last Node read: still unusable
            self._mask(bad)
        self._size(name, memory_changed=memory != self._gpu_memory(name))

    def _gpu_memory(self, name: str) -> int | None:
        row = self.state.row_of(name)
        node = self.state.nodes[row] if row is not None else None
        return node.gpu_memory_mib if node is not None else None

    def _on_namespace(self, ev: WatchEvent) -> None:
        """A namespace's labels are what affinity terms' namespace selectors match."""
        name = object_name(ev.obj)
        meta = ev.obj.get("metadata") or {}
        labels = (
            None if ev.type == "DELETED" else {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        )
        if self.namespaces.get(name) == labels:
            return
        if labels is None:
            self.namespaces.pop(name, None)
        else:
            self.namespaces[name] = labels
        self.pod_topology.namespaces_changed()

    # ------------------------------------------------------------------------------------------ pods
    def pod_for(self, key: str, holding: Holding) -> PodInfo | None:
        """The pod a ledger holding is of: by uid, or, for a reserved place, the pipelined pod or the pod
        being moved (by namespace/name)."""
        pod = self.pods.get(key)
        if pod is not None:
            return pod
        res = holding.reservation
        if res is not None:
            uid = res.uid or self.uid_of(res.pod_key)
            return self.pods.get(uid) if uid is not None else None
        return None

    def uid_of(self, key: str) -> str | None:
        """The uid of the pod named `key` (namespace/name) the mirror knows, if any."""
        namespace, _, name = key.partition("/")
        names = self.uids.get(namespace)
        return names.get(name) if names is not None else None

    def _name(self, pod: PodInfo) -> None:
        names = self.uids.get(pod.namespace)
        if names is None:
            names = self.uids[pod.namespace] = {}
        names[pod.name] = pod.uid

    def _on_pods(self, events: list[WatchEvent]) -> None:
        """Pod events, in order, each on its own (containment boundary 1). A pod the mirror has never seen
        (a relist brings 150,000) is parsed and taken by `_take_first`, the others by `_on_pod`'s full path.
        (The nodes' GPU memory the parser reads does not change during pod events: read once.)"""
        max_mib = self.max_gpu_memory_mib()
        pods, held, releasing, deferred = self.pods, self.ledger.pods, self.ledger.releasing, self._deferred
        name = self.scheduler_name
        for ev in events:
            try:
                uid = ev.type != "DELETED" and _uid(ev.obj)
                if not uid or uid in pods or uid in held or uid in releasing or uid in deferred:
                    self._on_pod(ev)
                    continue
                pod = parse_pod(ev.obj, scheduler_name=name, overlay=ev.overlay, max_gpu_memory_mib=max_mib)
                self._take_first(pod)
            except Exception as exc:  # one object, whatever went wrong with it: see containment.py
                self._unusable(ev, exc)

    def _on_pod(self, ev: WatchEvent) -> None:
        if (echoed := bind_echo(ev, self.pods, self.ledger)) is not None:
            self._replace(echoed)  # its job's pods changed phase (see bind_echo.py)
            return
        pod = parse_pod(
            ev.obj,
            scheduler_name=self.scheduler_name,
            overlay=ev.overlay,
            max_gpu_memory_mib=self.max_gpu_memory_mib(),
        )
        self._take_pod(ev, pod)

    def _replace(self, pod: PodInfo) -> None:
        """`pod` is what the mirror now knows of a pod it holds: it takes the old version's place, in its
        job too. (What it holds in the ledger is not touched.)"""
        old = self.pods.get(pod.uid)
        self.pods[pod.uid] = pod
        self.index.index(pod, old)
        self.handoff.refresh(pod)

    def bind_failed(self, uid: str) -> PodInfo | None:
        """Our bind of pod `uid` failed (its place is released): the pod as the mirror has it now, pending
        again; None when it is gone, or when the watch showed it bound after all (a bind whose answer was
        lost): then it is accounted where it is."""
        pod = self.pods.get(uid)
        if pod is not None and pod.holds_resources:
            if uid not in self.ledger:
                self._account_running(pod)
            return None
        self.handoff.refresh(pod, uid)
        return pod

    def deleting(self, uid: str) -> None:
        """Pod `uid` is being deleted by this scheduler (an eviction the watch does not show yet): it is in
        no job any more (its place is RELEASING in the ledger)."""
        pod = self.pods.get(uid)
        if pod is not None:
            self.pods[uid] = pod = replace(pod, terminating=True)
            self.index.unindex(pod)
            self.handoff.refresh(pod)

    def _invalid_pod(self, ev: WatchEvent, reason: str) -> None:
        """A pod the parser refused: pending with `InvalidRequest` and the reason; one that holds resources
        keeps being accounted where it runs."""
        pod = invalid_pod(ev.obj, reason, scheduler_name=self.scheduler_name, overlay=ev.overlay)
        if pod is None:
            return  # no name: nothing to report it on
        old = self.pods.get(pod.uid)
        if old is not None and self.ledger.on_node(old) and pod.holds_resources and ev.type != "DELETED":
            if pod.terminating and not old.terminating:  # being deleted: what it holds leaves the plan
                # (bound by us, the watch not showing it yet: on the node the event names)
                shown = old if old.holds_resources else replace(old, node=pod.node, phase=pod.phase)
                self._take_pod(ev, replace(shown, terminating=True))
            return  # keep the version we could read: it says what the pod holds, and where
        if old is not None and old.group is not None and not _annotations_readable(ev.obj):
            # Its pod-group annotation cannot be read: it stays in the gang it was in, so the gang is not
            # started (or kept pipelined) without it.
            pod = replace(pod, group=old.group)
        self._take_pod(ev, pod)

    def _take_first(self, pod: PodInfo) -> None:
        """`_take_pod` for a pod the mirror holds nothing of (no version, no place, nothing deferred): once
        per pod of a relist, so only what such a pod needs."""
        uid = pod.uid
        holds = pod.holds_resources
        admission = None
        if holds:
            pod, admission = self._in_admitted_job(pod)
        self.index.index(pod, None, admission)
        self.pods[uid] = pod
        self._name(pod)
        if holds:
            if pod.terminating:  # being deleted: its place leaves the plan, it occupies it until gone
                self._account_found(pod)
            else:
                self._account_running(pod, defer=True)
        # (Nothing waits for a pod never seen; one held just now was looked at by `_account_running`, one
        # deferred is when it is held: `_flush`.)
        if uid in self.handoff.waiting:
            self.handoff.refresh(pod)

    def _take_pod(self, ev: WatchEvent, pod: PodInfo) -> None:
        uid = pod.uid
        if uid in self._deferred:
            self._flush()  # this pod's earlier event must be in the arrays before this one is applied
        if ev.type == "DELETED":
            self.forget_pod(uid)
            return
        old = self.pods.get(uid)
        held, releasing = self.ledger.pods, self.ledger.releasing
        if old is None and uid not in held and uid not in releasing:
            self._take_first(pod)
            return
        holds = pod.holds_resources  # (where it is and its phase: the versions below keep them)
        admission = None
        if old is not None and holds and self.ledger.on_node(old):
            pod = self._as_admitted(pod, old)
        elif old is None and holds:
            pod, admission = self._in_admitted_job(pod)
        self.index.index(pod, old, admission)
        self.pods[uid] = pod
        self._name(pod)
        if old is not None and old.labels != pod.labels:  # inter-pod rules count it by its labels
            for table in (held, releasing):
                if uid in table:
                    self.pod_topology.refresh(uid, table[uid])
        if holds:
            if uid in releasing:
                pass  # evicted, still terminating: it stays releasing until it is gone
            elif pod.terminating:  # being deleted: its place leaves the plan, it occupies it until gone
                self._account_found(pod)
            elif uid not in held:
                self._account_running(pod, defer=True)
            else:
                self._follow_allocation(pod)
        elif pod.phase is PodPhase.PENDING and (uid in held or uid in releasing):
            pass  # a version older than our bind (the watch is behind it): it keeps its place
        elif uid in held or uid in releasing:
            self.ledger.release(uid)
        self.handoff.refresh(pod)

    def _as_admitted(self, pod: PodInfo, old: PodInfo) -> PodInfo:
        """A running pod runs with the request it was bound with and stays in the job it was bound in: GPU
        request annotations edited (or made invalid) after the bind change nothing it holds, nor how it is
        moved or evicted, and a pod-group annotation edited after the bind moves it to no other job (what it
        holds would be charged to that job's queue). The webhook refuses such edits; this is for pods it did
        not see."""
        if (pod.request, pod.cpu_milli, pod.memory_mib, pod.scalars, pod.error, pod.group) == (
            old.request, old.cpu_milli, old.memory_mib, old.scalars, old.error, old.group,
        ):  # fmt: skip
            return pod
        if pod.error is not None and old.error is None:
            self.errors.add(
                f"pod {pod.key}: {pod.error} (ignored: it runs with the request it was bound with)"
            )
        if pod.group != old.group:
            self.errors.add(
                f"pod {pod.key}: its pod group changed to {pod.group or 'none'} while it runs (ignored: it "
                f"stays in {old.group or 'a job of its own'} until it ends)"
            )
        return replace(
            pod, request=old.request, cpu_milli=old.cpu_milli, memory_mib=old.memory_mib, scalars=old.scalars,
            error=old.error, group=old.group,
        )  # fmt: skip

    def _in_admitted_job(self, pod: PodInfo) -> tuple[PodInfo, AdmissionReading | None]:
        """A pod first seen running (a restarted scheduler) is in the job its assignment records, whatever
        its pod-group annotation says now; with that admission when the pod is in its job (read once here,
        for the job index to pin the job to it without reading again)."""
        admission = admitted_with(pod)
        if admission is None:
            return pod, None
        if admission.job == job_key(pod):
            return pod, admission
        group = None if admission.job.startswith("pod:") else admission.job
        if group is not None and not group.startswith(f"{pod.namespace}/"):
            return pod, None  # not a group of its namespace: not ours to believe
        pod = replace(pod, group=group)
        return pod, admission if job_key(pod) == admission.job else None

    def forget_pod(self, uid: str) -> None:
        for waiting in self.awaiting_node.values():
            waiting.discard(uid)
        for held in self.unsized.values():
            held.discard(uid)
        self.uncharged.pop(uid, None)
        self._told_uncharged.pop(uid, None)
        old = self.pods.pop(uid, None)
        if old is not None:
            self.index.unindex(old)
            names = self.uids.get(old.namespace)
            if names is not None and names.get(old.name) == uid:
                del names[old.name]
                if not names:
                    del self.uids[old.namespace]
        self.ledger.release(uid)
        self.handoff.refresh(None, uid)

    # ------------------------------------------------------------------------------------ accounting
    def max_gpu_memory_mib(self) -> int | None:
        # Asked for every pod event: recomputed only when a node was written since (O(nodes) each time).
        key = self.state.node_epoch
        if self._max_mem_key != key:
            mems = [n.gpu_memory_mib for n in self.state.nodes if n is not None and n.gpu_count]
            self._max_mem = max(mems) if mems else None
            self._max_mem_key = key
        return self._max_mem

    def _account_running(self, pod: PodInfo, *, defer: bool = False) -> None:
        """Hold what a pod found running holds, as soon as it is seen: from its assignment (GPU shares in
        milli at once, their MiB once its node's GPU memory is known), else whole GPUs on its node. A pod
        whose GPUs cannot be charged blocks them (`_uncharged`)."""
        assert pod.node is not None
        state = self.state
        row = state.row_of(pod.node)
        if row is None:
            self.awaiting_node.setdefault(pod.node, set()).add(pod.uid)  # accounted when the node arrives
            return
        if self.uncharged:
            self.uncharged.pop(pod.uid, None)  # tried again now
        unreadable: str | None = None
        try:
            placement = from_assignment(state, pod, row) or from_allocation(state, pod, row)
        except Unaccountable as exc:
            unreadable = str(exc)
            placement = None
        else:
            if placement is None and defer and not whole_gpus_taken(pod):
                # No GPU to find (a CPU-only pod: we write no assignment for those): deferred too, so a
                # relist of many is not written to the arrays one batch per pod.
                placement = without_gpus(pod, row)
            if placement is not None and defer:
                self._deferred[pod.uid] = placement
                return
        if placement is None:
            self._flush()  # finding free whole GPUs needs the arrays up to date
            placement = from_request(self.state, pod, row)
        if placement is None or (unreadable is not None and pod.request.is_fractional):
            # Its GPUs are unknown (an assignment that cannot be read) or taken (too few free for it): the
            # node's GPUs take no new pod until it is charged or gone.
            why = unreadable or f"pod {pod.key} runs on {pod.node} but its GPUs cannot be accounted there"
            self._uncharged(pod, None, why)
            if placement is None:
                return
        elif unreadable is not None:
            self.errors.add(unreadable)
        try:
            self.ledger.hold(pod.uid, placement)
        except OvercommitError as exc:
            self._uncharged(pod, placement, f"pod {pod.key}: {exc}")
            return
        self._held(pod.uid, placement)
        self.index.touch(job_key(pod))  # its job's usage changed (the node may have come after the pod)
        self.handoff.refresh(pod)

    def _follow_allocation(self, pod: PodInfo) -> None:
        """A pod the scheduler did not place is charged on free GPUs until Tessera's device plugin says which
        it got (`tessera.dev/gpu-allocated`); from then on on those."""
        held = self.ledger.pods.get(pod.uid)
        if (
            GPU_ASSIGNMENT in pod.annotations
            or not pod.allocated
            or held is None
            or held.kind is not HoldKind.BOUND
        ):
            return
        placement = from_allocation(self.state, pod, held.placement.node)
        if placement is None or placement == held.placement:
            return
        try:
            self.ledger.hold(pod.uid, placement, held.owner)
        except OvercommitError as exc:
            self.errors.add(f"pod {pod.key} runs on the GPUs its device plugin named, but {exc}")
        else:
            self._held(pod.uid, placement)

    def _account_found(self, pod: PodInfo) -> None:
        """Hold what a pod found holding resources holds (`_account_running`); one being deleted leaves the
        plan at once, still charged to its queue's limit until it is gone (`_charge_releasing`)."""
        if pod.uid not in self.ledger:
            self._account_running(pod)
            if pod.terminating:
                self._charge_releasing(pod)
        if pod.terminating:
            self.ledger.start_releasing(pod.uid)

    def _charge_releasing(self, pod: PodInfo) -> None:
        """A pod first seen being deleted (a restarted scheduler) still counts toward its queue's limit until
        it is gone: charged to the queue its assignment records, else its label's."""
        if not pod.ours or pod.uid not in self.ledger:
            return
        admission = admitted_with(pod)
        queue = admission.queue if admission is not None else pod.queue
        job = admission.job if admission is not None else job_key(pod)
        self.ledger.reown(pod.uid, Owner(queue, job, not pod.preemptible))

    def _held(self, uid: str, placement: Placement) -> None:
        self._held_many({uid: placement})

    def _held_many(self, held: Mapping[str, Placement]) -> None:
        """These pods (by uid) hold these placements now: remember those whose GPUs' memory is still to
        come."""
        told = self._told_uncharged
        if told:
            for uid in held:
                told.pop(uid, None)
        shares = [(uid, pl) for uid, pl in held.items() if pl.gpus]
        if not shares:
            return
        names = self.state.node_names
        for (uid, pl), later in zip(shares, unsized(self.state, [pl for _, pl in shares]), strict=True):
            if later and (name := names[pl.node]) is not None:
                self.unsized.setdefault(name, set()).add(uid)

    def _uncharged(self, pod: PodInfo, placement: Placement | None, why: str) -> None:
        """A running pod whose GPUs could not be charged: they take no new pod until it is charged or gone
        (`placement`: where it would be; None: unknown, all of its node's GPUs)."""
        slots = frozenset(g.slot for g in placement.gpus) if placement is not None else None
        if placement is not None and not slots:
            self.errors.add(why)  # CPU or memory only: no GPU to keep new pods off
            return
        self.uncharged[pod.uid] = (pod, slots)
        if pod.uid in self._told_uncharged and self._told_uncharged[pod.uid] == slots:
            return  # tried again, with the same outcome: said already
        self._told_uncharged[pod.uid] = slots
        where = (
            f"GPU {','.join(map(str, sorted(slots)))} of {pod.node}" if slots else f"the GPUs of {pod.node}"
        )
        message = f"{why}; {where} take no new pod until it is charged or gone"
        log.warning(message)
        self.errors.add(message)

    def _size(self, name: str, *, memory_changed: bool = False) -> None:
        """Node `name`'s GPU memory may be known now: fill in the MiB of the shares held there without them;
        when it changed (a memory assumed from the GPU's model, then measured by its node agent), every
        share held there takes what its GPU has now. A share that no longer fits its GPU (the node's memory
        is smaller than the assignments say) leaves the pod uncharged, its GPUs blocked, rather than
        over-committing them."""
        uids = self.unsized.setdefault(name, set())
        row = self.state.row_of(name)
        if row is None:
            return
        if memory_changed:
            uids.update(
                uid for table in (self.ledger.pods, self.ledger.releasing) for uid, h in table.items()
                if h.placement.node == row and h.placement.gpus
            )  # fmt: skip
        for uid in sorted(uids):
            held = self.ledger.pods.get(uid) or self.ledger.releasing.get(uid)
            pod = self.pods.get(uid)
            if held is None or pod is None or held.placement.node != row:
                uids.discard(uid)
                continue
            if any(int(self.state.total_mib[row, g.slot]) <= 0 for g in held.placement.gpus):
                continue  # still unknown
            try:
                fresh = from_assignment(self.state, pod, row)
            except Unaccountable:
                fresh = None
            placement = fresh if fresh is not None and fresh.gpus else sized(self.state, held.placement)
            uids.discard(uid)
            if placement == held.placement:
                continue
            try:
                self.ledger.resize(uid, placement)
            except OvercommitError as exc:
                self.ledger.release(uid)
                self._uncharged(pod, placement, f"pod {pod.key}: {exc}")
            self.index.touch(job_key(pod))
        if not uids:
            self.unsized.pop(name, None)

    def _recharge(self) -> None:
        """Try again to charge the pods whose GPUs could not be, and keep new pods off the GPUs of those
        still not charged."""
        for uid, (old, _) in list(self.uncharged.items()):
            pod = self.pods.get(uid)
            if pod is None or not pod.holds_resources or pod.node != old.node:
                self.uncharged.pop(uid, None)
            elif uid not in self.ledger and uid not in self.ledger.releasing:
                self._account_found(pod)
        want: dict[int, set[int]] = {}
        for pod, slots in self.uncharged.values():
            row = self.state.row_of(pod.node) if pod.node is not None else None
            node = self.state.nodes[row] if row is not None else None
            if row is None or node is None:
                continue
            want.setdefault(row, set()).update(slots if slots is not None else range(node.gpu_count))
        for row in sorted(set(self.state.blocked) | set(want)):
            name = self.state.node_names[row]
            if self.state.set_blocked(row, want.get(row, set())) and name is not None:
                self.gpu_identities.measure(self.state, name)  # what its report says of their health


def _uid(obj: Any) -> str | None:
    """The uid `parse_pod` gives the pod of `obj` when the object has one (None: the full path finds out)."""
    try:
        uid = obj["metadata"]["uid"]
    except (KeyError, TypeError, IndexError):  # (no metadata, or not maps: the full path says why)
        return None
    return uid if type(uid) is str else (str(uid) if uid else None)


def _annotations_readable(obj: Any) -> bool:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return isinstance(meta, Mapping) and isinstance(meta.get("annotations") or {}, Mapping)
