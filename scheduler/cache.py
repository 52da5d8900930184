"""The scheduler's view of the cluster, kept current from watch events.

Nodes live in the `ClusterState` arrays; pods, queues and pod groups in dicts. A pod holding resources is
accounted in the arrays exactly once: from its `tessera.dev/gpu-assignment` when it has one (ours), else
whole GPUs taken on its node's free slots (pods of other schedulers, NVIDIA's device plugin).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pydantic import ValidationError

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT, MILLI_PER_GPU
from scheduler.api.podgroup import PodGroup
from scheduler.api.queue import Queue
from scheduler.api.report import GPUNodeReport
from scheduler.backend import ArrayNamespace
from scheduler.cluster import WatchEvent
from scheduler.model import GPUShare, NodeInfo, Placement, PodInfo
from scheduler.objects import InvalidObject, parse_node, parse_pod
from scheduler.reservations import Reservation, reservation_uid
from scheduler.state.cluster_state import ClusterState, OvercommitError
from scheduler.state.demand import PodDemand

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


@dataclass
class Cache:
    state: ClusterState
    pods: dict[str, PodInfo] = field(default_factory=dict)  # by uid
    placements: dict[str, Placement] = field(default_factory=dict)  # uid -> what it holds
    queues: dict[str, Queue] = field(default_factory=dict)
    podgroups: dict[str, PodGroup] = field(default_factory=dict)  # namespace/name
    # Pods bound to a node the cache has not seen yet, by node name.
    awaiting_node: dict[str, set[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # objects we could not use, for the user
    # Planned places of pods being moved (charged in `state`, not in `placements`), by pod namespace/name.
    reservations: dict[str, Reservation] = field(default_factory=dict)
    # Since when each running gang (namespace/name) has been below minMember.
    stale_since: dict[str, float] = field(default_factory=dict)
    # Pod shapes consolidation found no plan for, with the fingerprint of the layout it tried.
    futile: dict[PodDemand, int] = field(default_factory=dict)

    @classmethod
    def create(cls, xp: ArrayNamespace, *, max_gpus: int = 8, capacity: int = 64) -> Cache:
        return cls(state=ClusterState(xp, max_gpus=max_gpus, capacity=capacity))

    @property
    def xp(self) -> ArrayNamespace:
        return self.state.xp

    # --------------------------------------------------------------------------------------- events
    def apply(self, events: list[WatchEvent]) -> None:
        for ev in events:
            try:
                handler = getattr(self, f"_on_{ev.kind.lower()}")
                handler(ev)
            except (InvalidObject, ValidationError, ValueError) as exc:
                name = (ev.obj.get("metadata") or {}).get("name", "?")
                msg = f"{ev.kind} {name}: {one_line(exc)}"
                log.warning("ignoring invalid object: %s", msg)
                self.errors.append(msg)

    def _on_node(self, ev: WatchEvent) -> None:
        name = str((ev.obj.get("metadata") or {}).get("name", ""))
        if ev.type == "DELETED":
            for uid, pl in list(self.placements.items()):
                if self.state.node_names[pl.node] == name:
                    del self.placements[uid]
            for key, res in list(self.reservations.items()):
                if self.state.node_names[res.placement.node] == name:
                    del self.reservations[key]
            self.state.remove_node(name)
            return
        node = parse_node(ev.obj)
        row = self.state.row_of(node.name)
        if row is not None and self._shrinks_below_allocation(row, node):
            log.warning("node %s shrank below what is allocated on it; keeping old GPU layout", node.name)
        self.state.add_node(node)
        # Watches arrive in any order: pods bound here before we knew the node are accounted now.
        for uid in sorted(self.awaiting_node.pop(node.name, set())):
            pod = self.pods.get(uid)
            if (
                pod is not None
                and pod.holds_resources
                and pod.node == node.name
                and uid not in self.placements
            ):
                self._account_running(pod)

    def _shrinks_below_allocation(self, row: int, node: NodeInfo) -> bool:
        return any(
            pl.node == row and any(s.slot >= node.gpu_count for s in pl.gpus)
            for pl in self.placements.values()
        )

    def _on_pod(self, ev: WatchEvent) -> None:
        pod = parse_pod(ev.obj, max_gpu_memory_mib=self.max_gpu_memory_mib())
        if ev.type == "DELETED":
            self.forget_pod(pod.uid)
            return
        self.pods[pod.uid] = pod
        if pod.holds_resources:
            if pod.uid not in self.placements:
                self._account_running(pod)
        elif pod.uid in self.placements:
            self._release(pod.uid)

    def forget_pod(self, uid: str) -> None:
        for waiting in self.awaiting_node.values():
            waiting.discard(uid)
        self.pods.pop(uid, None)
        if uid in self.placements:
            self._release(uid)

    def _on_queue(self, ev: WatchEvent) -> None:
        q = Queue.model_validate(ev.obj)
        if ev.type == "DELETED":
            self.queues.pop(q.name, None)
        else:
            self.queues[q.name] = q

    def _on_podgroup(self, ev: WatchEvent) -> None:
        g = PodGroup.model_validate(ev.obj)
        key = f"{g.metadata.namespace or 'default'}/{g.metadata.name}"
        if ev.type == "DELETED":
            self.podgroups.pop(key, None)
        else:
            self.podgroups[key] = g

    def _on_gpunodereport(self, ev: WatchEvent) -> None:
        if ev.type == "DELETED":
            return
        report = GPUNodeReport.model_validate(ev.obj)
        row = self.state.row_of(report.spec.node)
        if row is None:
            return
        for gpu in report.spec.gpus:
            if gpu.index >= self.state.max_gpus:
                continue
            self.state.set_gpu_health(row, gpu.index, gpu.health != "Unhealthy")
            self.state.set_reported_used(row, gpu.index, gpu.memory_used_mib)

    # ----------------------------------------------------------------------------------- accounting
    def max_gpu_memory_mib(self) -> int | None:
        mems = [n.gpu_memory_mib for n in self.state.nodes if n is not None and n.gpu_count]
        return max(mems) if mems else None

    def assume(self, pod: PodInfo, placement: Placement) -> None:
        """Record a placement the scheduler made (already applied to the arrays)."""
        self.placements[pod.uid] = placement

    def unassume(self, uid: str) -> Placement | None:
        return self.placements.pop(uid, None)

    def reserve(self, res: Reservation) -> None:
        """Keep a planned place (already applied to the arrays). It is listed in `placements` too, under
        a key no pod has, so that the arrays always equal the sum of `placements`."""
        self.reservations[res.pod_key] = res
        self.placements[reservation_uid(res.pod_key)] = res.placement

    def drop_reservation(self, key: str) -> Reservation | None:
        """Forget a reservation and give its resources back."""
        res = self.reservations.pop(key, None)
        self.placements.pop(reservation_uid(key), None)
        if res is not None:
            try:
                self.state.release(res.placement)
            except OvercommitError as exc:
                log.error("release of reservation %s failed: %s", key, exc)
        return res

    def _release(self, uid: str) -> None:
        pl = self.placements.pop(uid)
        try:
            self.state.release(pl)
        except OvercommitError as exc:  # node changed under us; never let it stop the cache
            log.error("release of %s failed: %s", uid, exc)

    def _account_running(self, pod: PodInfo) -> None:
        assert pod.node is not None
        row = self.state.row_of(pod.node)
        if row is None:
            self.awaiting_node.setdefault(pod.node, set()).add(pod.uid)  # accounted when the node arrives
            return
        placement = self._placement_from_assignment(pod, row) or self._placement_from_request(pod, row)
        if placement is None:
            msg = f"pod {pod.key} runs on {pod.node} but its GPUs cannot be accounted there"
            log.warning(msg)
            self.errors.append(msg)
            return
        try:
            self.state.place(placement)
        except OvercommitError as exc:
            self.errors.append(f"pod {pod.key}: {exc}")
            return
        self.placements[pod.uid] = placement

    def _placement_from_assignment(self, pod: PodInfo, row: int) -> Placement | None:
        raw = pod.annotations.get(GPU_ASSIGNMENT)
        if not raw:
            return None
        try:
            a = GPUAssignment.from_annotation(raw)
        except ValueError as exc:
            self.errors.append(f"pod {pod.key}: {exc}")
            return None
        if a.node != pod.node:
            self.errors.append(f"pod {pod.key}: assignment names node {a.node} but it is bound to {pod.node}")
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
