"""Allocate for the right pod: the bind-lock hand-off of DESIGN.md step 3.

The kubelet does not say which pod it is admitting. The scheduler locks the node (`tessera.dev/bind-lock`
names the pod) from bind until allocation, so the locked pod is the one being admitted. Allocate reads
it, checks its `tessera.dev/gpu-assignment` against this node, answers with the GPUs and limits, marks the
pod `tessera.dev/gpu-allocated` and releases the lock. Calls are serialised: a second Allocate only sees
the lock once the scheduler has handed it to the next pod.

That reasoning holds only if the locked pod is the only one on the node that could be asking. A pod the
scheduler never placed (another scheduler's pod asking for our resource, one whose author set
`spec.nodeName`) could be admitted while the lock is held and take the locked pod's GPUs. So Allocate
answers only when no other pod on the node is waiting for the same resource; while one is, it waits (the
kubelet admits pods one at a time: a pod refused a moment ago is about to be marked Failed) and then
refuses rather than guess. And a `tessera.dev/gpu-allocated` that this plugin did not write (preset by a
user) does not make the lock stale: only pods it served itself, or that the kubelet has started, count
as served.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from device_plugin.cluster import ClusterError, PodCluster, PodView
from device_plugin.inventory import Inventory
from device_plugin.limits import GrantedGPU, container_response
from device_plugin.resources import Resource
from device_plugin.v1beta1 import api_pb2
from scheduler.api.assignment import GPUAssignment
from scheduler.api.bind_lock import BindLock
from scheduler.api.keys import BIND_LOCK, GPU_ALLOCATED, GPU_ASSIGNMENT

log = logging.getLogger(__name__)
LOCK_POLL_S = 0.05
SERVED_MEMORY = 4096


class AllocationError(Exception):
    """Allocate must fail; the message (one line) reaches the pod's events through the kubelet."""


@dataclass(frozen=True)
class LockedPod:
    lock: BindLock
    raw_lock: str
    pod: PodView
    assignment: GPUAssignment
    granted: list[GrantedGPU]

    @property
    def ref(self) -> str:
        return self.lock.pod


def rfc3339_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Allocator:
    def __init__(
        self,
        node: str,
        inventory: Inventory,
        cluster: PodCluster | None,
        *,
        lock_wait_s: float = 3.0,
        mps_pipe_dir: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._node = node
        self._inventory = inventory
        self._cluster = cluster
        self._lock_wait = lock_wait_s
        self._mps = mps_pipe_dir
        self._clock = clock
        self._sleep = sleep
        self._mutex = threading.Lock()
        # Whole-GPU pods may spread their GPUs over several containers, each its own Allocate: the
        # GPUs of the locked pod not yet handed out, by pod UID (only the locked pod is ever tracked).
        self._pending_whole: tuple[str, list[GrantedGPU]] | None = None
        # UIDs of the pods this process served (in order; the oldest forgotten past SERVED_MEMORY).
        self._served: dict[str, None] = {}

    # ---- Allocate -------------------------------------------------------------------------------------

    def allocate(
        self, resource: Resource, requests: Sequence[Sequence[str]]
    ) -> list[api_pb2.ContainerAllocateResponse]:
        if self._cluster is None:
            raise AllocationError(
                f"no Kubernetes API configured (standalone mode): cannot read the pod's {GPU_ASSIGNMENT}"
            )
        with self._mutex:
            deadline = self._clock() + self._lock_wait
            target = self._wait_for_locked_pod(self._cluster, resource, deadline)
            self._wait_until_alone(self._cluster, resource, target, deadline)
            if resource.kind == "slice":
                responses = self._slices(resource, target, requests)
                done = True
            else:
                responses, done = self._whole(target, requests)
            if done:
                self._finish(self._cluster, target)
            return responses

    def _slices(
        self, resource: Resource, target: LockedPod, requests: Sequence[Sequence[str]]
    ) -> list[api_pb2.ContainerAllocateResponse]:
        if target.assignment.whole_gpus:
            raise AllocationError(
                f"pod {target.ref} was assigned whole GPUs but its container asks for {resource.name}"
            )
        asked = sum(len(r) for r in requests)
        if asked != len(target.granted):
            raise AllocationError(
                f"pod {target.ref} asks for {asked} {resource.name} but the scheduler assigned it "
                f"{len(target.granted)} GPU(s); the slice limit must equal gpu-fraction-num-devices"
            )
        offered = {resource.gpu_uuid(d) for r in requests for d in r}
        if offered != {g.uuid for g in target.granted}:
            # Harmless for the pod (the assignment decides), but the kubelet's slice count drifts.
            log.warning(
                "allocate pod=%s kubelet chose slices of %s, assigned %s",
                target.ref,
                offered,
                [g.uuid for g in target.granted],
            )
        responses = []
        rest = list(target.granted)
        for request in requests:
            mine, rest = rest[: len(request)], rest[len(request) :]
            if mine:
                responses.append(container_response(mine, fractional=True, mps_pipe_dir=self._mps))
            else:
                responses.append(api_pb2.ContainerAllocateResponse())
        return responses

    def _whole(
        self, target: LockedPod, requests: Sequence[Sequence[str]]
    ) -> tuple[list[api_pb2.ContainerAllocateResponse], bool]:
        if not target.assignment.whole_gpus:
            raise AllocationError(
                f"pod {target.ref} was assigned a GPU fraction but its container asks for whole GPUs"
            )
        if self._pending_whole is not None and self._pending_whole[0] == target.pod.uid:
            remaining = list(self._pending_whole[1])
        else:
            remaining = list(target.granted)
        responses = []
        for request in requests:
            mine = []
            for device_id in request:
                match = next((g for g in remaining if g.uuid == device_id), None)
                if match is None:
                    raise AllocationError(
                        f"the kubelet offered GPU {device_id} but pod {target.ref} was assigned "
                        f"{', '.join(g.uuid for g in remaining) or 'no further GPUs'}"
                    )
                remaining.remove(match)
                mine.append(match)
            responses.append(container_response(mine, fractional=False))
        self._pending_whole = (target.pod.uid, remaining) if remaining else None
        return responses, not remaining

    def _finish(self, cluster: PodCluster, target: LockedPod) -> None:
        self._served[target.pod.uid] = None
        while len(self._served) > SERVED_MEMORY:
            del self._served[next(iter(self._served))]
        try:
            cluster.mark_allocated(target.pod, rfc3339_now())
            released = cluster.release_bind_lock(self._node, target.raw_lock)
        except ClusterError as exc:
            raise AllocationError(f"could not record the allocation of pod {target.ref}: {exc}") from None
        if not released:
            log.warning("allocate pod=%s bind lock changed before release; left as is", target.ref)
        log.info(
            "allocated pod=%s gpus=%s",
            target.ref,
            ",".join(f"{g.uuid}:{g.assigned.milli}" for g in target.granted),
        )

    # ---- GetPreferredAllocation ----------------------------------------------------------------------

    def preferred(
        self, resource: Resource, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """Slices (or GPUs) of the locked pod's assigned GPUs first; never fails (Allocate does)."""
        wanted: list[str] = []
        if self._cluster is not None:
            try:
                with self._mutex:
                    target = self._wait_for_locked_pod(self._cluster, resource, self._clock())
                    pending = self._pending_whole
                granted = pending[1] if pending and pending[0] == target.pod.uid else target.granted
                wanted = [g.uuid for g in granted]
            except AllocationError as exc:
                log.debug("preferred allocation without an assignment: %s", exc)
        chosen = list(must_include)[:size]
        free = [d for d in available if d not in chosen]
        for uuid in wanted:
            pick = next((d for d in free if resource.gpu_uuid(d) == uuid), None)
            if pick is not None and len(chosen) < size:
                chosen.append(pick)
                free.remove(pick)
        chosen.extend(free[: max(0, size - len(chosen))])
        return chosen

    # ---- Finding and checking the locked pod ---------------------------------------------------------

    def _wait_for_locked_pod(self, cluster: PodCluster, resource: Resource, deadline: float) -> LockedPod:
        while True:
            try:
                found = self._locked_pod(cluster)
            except ClusterError as exc:
                raise AllocationError(f"cannot read the bind lock of node {self._node}: {exc}") from None
            if found is not None:
                return self._check(resource, found[0], found[1], found[2])
            if self._clock() >= deadline:
                raise AllocationError(
                    f"no pod holds the bind lock ({BIND_LOCK}) on node {self._node}: no GPU pod was bound "
                    "here by the Tessera scheduler (is spec.schedulerName tessera?)"
                )
            self._sleep(LOCK_POLL_S)

    def _wait_until_alone(
        self, cluster: PodCluster, resource: Resource, target: LockedPod, deadline: float
    ) -> None:
        """Return once no pod but the locked one waits on this node for `resource`; refuse at `deadline`."""
        while True:
            try:
                others = [p for p in cluster.pods_on_node(self._node) if self._contends(p, resource, target)]
            except ClusterError as exc:
                raise AllocationError(f"cannot list the pods of node {self._node}: {exc}") from None
            if not others:
                return
            if self._clock() >= deadline:
                names = ", ".join(sorted(p.ref for p in others)[:5])
                raise AllocationError(
                    f"cannot tell which pod the kubelet is admitting: besides {target.ref}, which the "
                    f"Tessera scheduler placed here, pod(s) {names} on node {self._node} ask for "
                    f"{resource.name} without having been placed by it; refusing rather than give them "
                    f"its GPUs (pods asking for {resource.name} must be placed by the Tessera scheduler)"
                )
            self._sleep(LOCK_POLL_S)

    def _contends(self, pod: PodView, resource: Resource, target: LockedPod) -> bool:
        """Could the kubelet be admitting `pod` for `resource` now, instead of the locked pod?"""
        return (
            pod.uid != target.pod.uid
            and resource.name in pod.resources
            and pod.phase == "Pending"
            and not pod.deleting
            and not pod.started
            and pod.uid not in self._served
        )

    def _locked_pod(self, cluster: PodCluster) -> tuple[BindLock, str, PodView] | None:
        raw = cluster.read_bind_lock(self._node)
        if raw is None:
            return None
        try:
            lock = BindLock.from_annotation(raw)
        except ValueError as exc:
            raise AllocationError(f"node {self._node}: {exc}") from None
        pod = cluster.read_pod(lock.namespace, lock.name)
        stale = None
        if pod is None:
            stale = "no longer exists"
        elif pod.uid != lock.uid:
            stale = f"was replaced (uid {pod.uid}, lock names {lock.uid})"
        elif pod.phase in ("Succeeded", "Failed"):
            stale = f"has {pod.phase.lower()}"
        elif self._served_before(pod) and not self._whole_pending_for(pod.uid):
            stale = "is already allocated"
        if stale is None and pod is not None:
            return lock, raw, pod
        # A lock left behind by a finished hand-off: drop it (only if unchanged) and keep waiting.
        log.warning("bind lock on node %s names pod %s, which %s; releasing it", self._node, lock.pod, stale)
        cluster.release_bind_lock(self._node, raw)
        return None

    def _served_before(self, pod: PodView) -> bool:
        """Served by this process, or marked allocated (by a process before a restart) and started by the
        kubelet. A `tessera.dev/gpu-allocated` alone proves nothing: a user may have preset it."""
        return pod.uid in self._served or (GPU_ALLOCATED in pod.annotations and pod.started)

    def _whole_pending_for(self, uid: str) -> bool:
        return self._pending_whole is not None and self._pending_whole[0] == uid

    def _check(self, resource: Resource, lock: BindLock, raw: str, pod: PodView) -> LockedPod:
        ref = lock.pod
        if resource.name not in pod.resources:
            raise AllocationError(
                f"pod {ref} holds the bind lock but asks for no {resource.name}: the kubelet is admitting "
                "a pod the Tessera scheduler did not place here; refusing"
            )
        text = pod.annotations.get(GPU_ASSIGNMENT)
        if text is None:
            raise AllocationError(f"pod {ref} holds the bind lock but has no {GPU_ASSIGNMENT} annotation")
        try:
            assignment = GPUAssignment.from_annotation(text)
        except ValueError as exc:
            raise AllocationError(f"pod {ref}: {exc}") from None
        if assignment.node != self._node:
            raise AllocationError(
                f"pod {ref} is assigned to node {assignment.node} but this is node {self._node}"
            )
        if pod.node_name and pod.node_name != self._node:
            raise AllocationError(f"pod {ref} is bound to node {pod.node_name} but this is node {self._node}")
        if pod.deleting:
            raise AllocationError(f"pod {ref} is being deleted")
        if not assignment.gpus:
            raise AllocationError(f"pod {ref}: {GPU_ASSIGNMENT} lists no GPUs")
        granted = []
        for a in assignment.gpus:
            gpu = self._inventory.by_uuid(a.uuid) if a.uuid else self._inventory.by_index(a.index)
            where = a.uuid or f"index {a.index}"
            if gpu is None:
                raise AllocationError(
                    f"pod {ref} is assigned GPU {where}, which node {self._node} does not have"
                )
            if gpu.info.mig_enabled:
                raise AllocationError(
                    f"pod {ref} is assigned GPU {gpu.uuid}, which is in MIG mode and not shared"
                )
            if not gpu.healthy:
                raise AllocationError(
                    f"pod {ref} is assigned GPU {gpu.uuid}, which is unhealthy ({gpu.reason or 'unknown'})"
                )
            if a.memory_mib > gpu.info.memory_total_mib:
                raise AllocationError(
                    f"pod {ref} is assigned {a.memory_mib} MiB on GPU {gpu.uuid}, which has "
                    f"{gpu.info.memory_total_mib} MiB"
                )
            granted.append(GrantedGPU(a, gpu))
        if len({g.uuid for g in granted}) != len(granted):
            raise AllocationError(f"pod {ref}: {GPU_ASSIGNMENT} names the same GPU twice")
        return LockedPod(lock, raw, pod, assignment, granted)
