"""The scheduler's mirror of the cluster, kept current from watch events.

Nodes live in the `ClusterState` arrays; pods, queues and pod groups in dicts. A pod holding resources is
accounted in the ledger exactly once: from its `tessera.dev/gpu-assignment` when it has one (ours, so a
restarted scheduler rebuilds the same picture), else whole GPUs taken on its node's free slots (pods of
other schedulers, NVIDIA's device plugin). Every pod change is told to the job index.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT, MILLI_PER_GPU
from scheduler.api.podgroup import PodGroup
from scheduler.api.queue import Queue
from scheduler.api.topology import Topology
from scheduler.cluster import WatchEvent
from scheduler.error_log import ErrorLog
from scheduler.gpu_identity import GPUIdentities
from scheduler.job_index import JobIndex
from scheduler.jobs import job_key
from scheduler.ledger import Ledger
from scheduler.model import GPUShare, NodeInfo, Placement, PodInfo, PodPhase
from scheduler.objects import InvalidObject, parse_node, parse_pod, pod_queue, started_s
from scheduler.state.cluster_state import OvercommitError

log = logging.getLogger(__name__)


def one_line(exc: Exception) -> str:
    """A validation error as one readable line: "spec.resources.gpu: Value error, limit 2 is below quota 4"."""
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            parts.append(f"{where}: {err['msg']}" if where else err["msg"])
        return "; ".join(parts)
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class ClusterMirror:
    def __init__(self, ledger: Ledger, errors: ErrorLog) -> None:
        self.ledger = ledger
        self.state = ledger.state
        self.errors = errors
        self.pods: dict[str, PodInfo] = {}  # by uid
        self.queues: dict[str, Queue] = {}
        self.podgroups: dict[str, PodGroup] = {}  # namespace/name
        self.topologies: dict[str, Topology] = {}  # their levels are columns of the state's `domain`
        self.priority_classes: dict[str, int] = {}  # the cluster's PriorityClasses: name -> value
        self.index = JobIndex(ledger, self.podgroups, self.priority_classes)
        # Each node's GPU UUIDs, memory and health, from its GPUNodeReport (the agent is their one source).
        self.gpu_identities = GPUIdentities()
        # Pods bound to a node the mirror has not seen yet, by node name.
        self.awaiting_node: dict[str, set[str]] = {}
        # Placements read from assignments during `apply`, written to the arrays in one go (see _flush).
        self._deferred: dict[str, tuple[PodInfo, Placement]] = {}
        self._max_mem: int | None = None
        self._max_mem_key = -1

    def apply(self, events: list[WatchEvent]) -> None:
        for ev in events:
            try:
                if ev.kind != "Pod":
                    self._flush()
                if ev.kind == "Pod":
                    self._on_pod(ev)
                elif ev.kind == "Node":
                    self._on_node(ev)
                elif ev.kind == "Queue":
                    self._on_queue(ev)
                elif ev.kind == "PodGroup":
                    self._on_podgroup(ev)
                elif ev.kind == "GPUNodeReport":
                    self._on_gpunodereport(ev)
                elif ev.kind == "PriorityClass":
                    self._on_priority_class(ev)
                elif ev.kind == "Topology":
                    self._on_topology(ev)
            except (InvalidObject, ValidationError, ValueError) as exc:
                name = (ev.obj.get("metadata") or {}).get("name", "?")
                msg = f"{ev.kind} {name}: {one_line(exc)}"
                log.warning("ignoring invalid object: %s", msg)
                self.errors.add(msg)
        self._flush()

    def _flush(self) -> None:
        """Hold the deferred placements: in bulk, or one by one (with per-pod errors) if the bulk
        update refuses because one of them does not fit."""
        if not self._deferred:
            return
        items, self._deferred = list(self._deferred.items()), {}
        try:
            self.ledger.hold_many((uid, pl) for uid, (_, pl) in items)
        except OvercommitError:
            for uid, (pod, pl) in items:
                try:
                    self.ledger.hold(uid, pl)
                except OvercommitError as exc:
                    self.errors.add(f"pod {pod.key}: {exc}")

    # ----------------------------------------------------------------------------------------- nodes
    def _on_node(self, ev: WatchEvent) -> None:
        name = str((ev.obj.get("metadata") or {}).get("name", ""))
        if ev.type == "DELETED":
            row = self.state.row_of(name)
            if row is not None:
                for uid in self.ledger.forget_row(row):
                    if (gone := self.pods.get(uid)) is not None:
                        self.index.touch(job_key(gone))
            self.state.remove_node(name)
            self.gpu_identities.forget(name)
            return
        node = self.gpu_identities.complete(parse_node(ev.obj), self.errors.add)
        row = self.state.row_of(node.name)
        if row is not None and self._shrinks_below_allocation(row, node):
            log.warning("node %s shrank below what is allocated on it; keeping old GPU layout", node.name)
        self.state.add_node(node)
        self.gpu_identities.measure(self.state, node.name)
        # Watches arrive in any order: pods bound here before we knew the node are accounted now.
        for uid in sorted(self.awaiting_node.pop(node.name, set())):
            pod = self.pods.get(uid)
            if pod is not None and pod.holds_resources and pod.node == node.name and uid not in self.ledger:
                self._account_running(pod)

    def _shrinks_below_allocation(self, row: int, node: NodeInfo) -> bool:
        old = self.state.nodes[row]
        if old is not None and node.gpu_count >= old.gpu_count:
            return False  # the common update (labels, taints, a report): no need to scan placements
        return any(
            h.placement.node == row and any(s.slot >= node.gpu_count for s in h.placement.gpus)
            for h in self.ledger.pods.values()
        )

    def _on_gpunodereport(self, ev: WatchEvent) -> None:
        self.gpu_identities.on_report(self.state, ev.type, ev.obj)

    # ------------------------------------------------------------------------------------------ pods
    def _on_pod(self, ev: WatchEvent) -> None:
        if self._bind_echo(ev):
            return
        pod = parse_pod(ev.obj, max_gpu_memory_mib=self.max_gpu_memory_mib())
        if pod.uid in self._deferred:
            self._flush()  # this pod's earlier event must be in the arrays before this one is applied
        if ev.type == "DELETED":
            self.forget_pod(pod.uid)
            return
        self.index.index(pod, self.pods.get(pod.uid))
        self.pods[pod.uid] = pod
        if pod.holds_resources:
            if pod.uid in self.ledger.releasing:
                pass  # evicted, still terminating: it stays releasing until it is gone
            elif pod.terminating:  # being deleted: its place leaves the plan, it occupies it until gone
                if pod.uid not in self.ledger:
                    self._account_running(pod)
                self.ledger.start_releasing(pod.uid)
            elif pod.uid not in self.ledger:
                self._account_running(pod, defer=True)
        elif pod.uid in self.ledger or pod.uid in self.ledger.releasing:
            self.ledger.release(pod.uid)

    def _bind_echo(self, ev: WatchEvent) -> bool:
        """The API's answer to our own bind (same pod, on the node we chose, now Running): update the phase
        in place instead of parsing the whole pod again. Anything else that changed takes the full path."""
        if ev.type != "MODIFIED":
            return False
        meta = ev.obj.get("metadata") or {}
        uid = str(meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
        old = self.pods.get(uid)
        if (
            old is None
            or old.phase != PodPhase.BOUND
            or uid not in self.ledger
            or meta.get("deletionTimestamp")
        ):
            return False
        phase = str((ev.obj.get("status") or {}).get("phase") or "Pending")
        if (ev.obj.get("spec") or {}).get("nodeName") != old.node or phase not in ("Pending", "Running"):
            return False
        annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
        if _without_assignment(annotations) != _without_assignment(old.annotations):
            return False
        if pod_queue({str(k): str(v) for k, v in (meta.get("labels") or {}).items()}) != old.queue:
            return False
        old.phase = PodPhase.RUNNING if phase == "Running" else PodPhase.BOUND
        old.started_s = started_s(ev.obj)
        old.annotations = annotations
        self.index.touch(job_key(old))
        return True

    def forget_pod(self, uid: str) -> None:
        for waiting in self.awaiting_node.values():
            waiting.discard(uid)
        old = self.pods.pop(uid, None)
        if old is not None:
            self.index.unindex(old)
        self.ledger.release(uid)

    # ------------------------------------------------------------------------------ queues and groups
    def _on_queue(self, ev: WatchEvent) -> None:
        q = Queue.model_validate(ev.obj)
        if ev.type == "DELETED":
            self.queues.pop(q.name, None)
        else:
            self.queues[q.name] = q

    def _on_topology(self, ev: WatchEvent) -> None:
        if ev.type == "DELETED":
            name = str((ev.obj.get("metadata") or {}).get("name", ""))
            self.topologies.pop(name, None)
        else:
            t = Topology.model_validate(ev.obj)
            self.topologies[t.name] = t
        self.state.set_topologies({name: t.label_keys for name, t in self.topologies.items()})

    def _on_podgroup(self, ev: WatchEvent) -> None:
        g = PodGroup.model_validate(ev.obj)
        key = f"{g.metadata.namespace or 'default'}/{g.metadata.name}"
        self.index.touch(key)
        if ev.type == "DELETED":
            self.podgroups.pop(key, None)
        else:
            self.podgroups[key] = g

    def _on_priority_class(self, ev: WatchEvent) -> None:
        name = str((ev.obj.get("metadata") or {}).get("name", ""))
        value = ev.obj.get("value")
        if ev.type == "DELETED":
            self.priority_classes.pop(name, None)
        elif isinstance(value, int) and not isinstance(value, bool):
            self.priority_classes[name] = value
        else:
            raise ValueError(f"value {value!r} is not an integer")
        self.index.touch_all()  # a PodGroup naming it may now have another priority

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
        assert pod.node is not None
        row = self.state.row_of(pod.node)
        if row is None:
            self.awaiting_node.setdefault(pod.node, set()).add(pod.uid)  # accounted when the node arrives
            return
        placement = self._placement_from_assignment(pod, row)
        if placement is not None and defer:
            self._deferred[pod.uid] = (pod, placement)
            return
        if placement is None:
            self._flush()  # finding free whole GPUs needs the arrays up to date
            placement = self._placement_from_request(pod, row)
        if placement is None:
            msg = f"pod {pod.key} runs on {pod.node} but its GPUs cannot be accounted there"
            log.warning(msg)
            self.errors.add(msg)
            return
        try:
            self.ledger.hold(pod.uid, placement)
        except OvercommitError as exc:
            self.errors.add(f"pod {pod.key}: {exc}")
            return
        self.index.touch(job_key(pod))  # its job's usage changed (the node may have come after the pod)

    def _placement_from_assignment(self, pod: PodInfo, row: int) -> Placement | None:
        raw = pod.annotations.get(GPU_ASSIGNMENT)
        if not raw:
            return None
        try:
            a = GPUAssignment.from_annotation(raw)
        except ValueError as exc:
            self.errors.add(f"pod {pod.key}: {exc}")
            return None
        if a.node != pod.node:
            self.errors.add(f"pod {pod.key}: assignment names node {a.node} but it is bound to {pod.node}")
            return None
        shares = tuple(
            GPUShare(
                slot=g.index,
                milli=g.milli,
                mib=g.memory_mib or self.state.share_for(row, g.index, g.milli, 0).mib,
            )
            for g in a.gpus
        )
        return Placement(node=row, gpus=shares, cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib)

    def _placement_from_request(self, pod: PodInfo, row: int) -> Placement | None:
        n = pod.request.num_devices if pod.request.kind == "whole" else 0
        if pod.error or pod.request.is_fractional:
            n = 0  # a fractional pod without an assignment was not placed by us: count no GPU share
        free = [
            j for j in range(self.state.max_gpus)
            if bool(self.state.present[row, j]) and int(self.state.free_milli[row, j]) == MILLI_PER_GPU
        ]  # fmt: skip
        if len(free) < n:
            return None
        shares = tuple(GPUShare(j, MILLI_PER_GPU, int(self.state.total_mib[row, j])) for j in free[:n])
        return Placement(node=row, gpus=shares, cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib)


def _without_assignment(annotations: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in annotations.items() if k != GPU_ASSIGNMENT}
