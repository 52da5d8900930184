"""The hand-off of DESIGN.md step 3: `Allocate` for the right pod, and `PreStartContainer` confirming it.

The kubelet does not say which pod it admits. The plugin finds it among the pods its own watch shows on
this node (`watch.py`): one that asks for the resource and that the kubelet has not given its devices yet.
The kubelet admits one pod at a time, and its PodResources API (`kubelet_pods.py`) lists the pods it knows
with the devices each holds: the pod being admitted is the one that holds none of those it asks for. The
Tessera scheduler keeps at most one of its pods per node waiting for `Allocate`, so there is usually one
candidate, and the kubelet's list settles the rest (a pod another scheduler placed, a gang's members bound
together, a watch that lags behind the kubelet).

- A pod the scheduler placed (it carries `tessera.dev/gpu-assignment`) is answered with its assigned GPUs,
  whichever containers ask: init containers, sidecars, app containers; a container reusing an init
  container's devices (the kubelet calls `Allocate` for it with the same IDs) gets the same GPUs. The
  assignment is checked against this node (GPUs present, healthy, not MIG, memory fits, the slice count).
- A pod Tessera did not place gets whole GPUs as NVIDIA's plugin would: the ones the kubelet chose
  (`GetPreferredAllocation` steers it to GPUs neither held nor assigned), refused if a Tessera pod holds or
  was assigned one of them. Slices are served to placed pods only.

`PreStartContainer` (opted in) asks the kubelet which pod holds the container's devices: a container whose
devices were answered for another pod does not start (the call fails; the kubelet's event carries the
reason). Once the kubelet shows a pod holding what it was answered with (right after its last `Allocate`,
or at the latest here), the pod is marked `tessera.dev/gpu-allocated` with the GPUs it got
(`confirm.py`): the scheduler then lets its node take the next pod, and charges a pod it did not place to
exactly those GPUs. Calls are serialised; any mismatch fails the call with a one-line message the kubelet
puts in the pod's events.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from device_plugin.confirm import Confirmations
from device_plugin.inventory import Inventory
from device_plugin.kubelet_pods import HeldDevices, KubeletPods, KubeletPodsError
from device_plugin.limits import GrantedGPU, container_response
from device_plugin.pods import PodView
from device_plugin.resources import SLICE_SEPARATOR, Resource
from device_plugin.v1beta1 import api_pb2
from scheduler.api.allocation import AllocatedGPU, GPUAllocation
from scheduler.api.keys import GPU_ASSIGNMENT, GPU_SLICE_RESOURCE, MILLI_PER_GPU

log = logging.getLogger(__name__)
POLL_S = 0.25  # how long a wait for the watch lasts before the kubelet's list is read again


class AllocationError(Exception):
    """The call must fail; the message (one line) reaches the pod's events through the kubelet."""


class PodSource(Protocol):
    """This node's pods (`watch.PodWatch`)."""

    @property
    def version(self) -> int: ...

    def pods(self) -> list[PodView]: ...

    def get(self, uid: str) -> PodView | None: ...

    def by_name(self, namespace: str, name: str) -> PodView | None: ...

    def wait_change(self, seen: int, timeout_s: float) -> int: ...


@dataclass
class Served:
    """What this process answered one pod, for one resource."""

    pod: PodView
    resource: str
    granted: tuple[GrantedGPU, ...] | None  # a placed pod's assigned GPUs; None: a pod Tessera did not place
    answers: list[tuple[str, ...]] = field(default_factory=list)  # device IDs per container answered
    gpus: dict[str, int] = field(default_factory=dict)  # every GPU answered: uuid -> index

    @property
    def complete(self) -> bool:
        """Every container of the pod that asks for the resource has been answered."""
        return len(self.answers) >= len(self.pod.asking(self.resource))

    def allocation(self) -> GPUAllocation:
        gpus = sorted(self.gpus.items(), key=lambda kv: kv[1])
        return GPUAllocation(gpus=[AllocatedGPU(index=i, uuid=u) for u, i in gpus])


class Allocator:
    def __init__(
        self,
        node: str,
        inventory: Inventory,
        pods: PodSource | None,
        *,
        kubelet: KubeletPods | None = None,
        confirmations: Confirmations | None = None,
        pod_wait_s: float = 3.0,
        mps_pipe_dir: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._node = node
        self._inventory = inventory
        self._pods = pods
        self._kubelet = kubelet
        self._confirm = confirmations
        self._pod_wait = pod_wait_s
        self._mps = mps_pipe_dir
        self._clock = clock
        self._mutex = threading.Lock()
        self._served: dict[str, Served] = {}  # by pod uid
        self._holder: dict[tuple[str, str], str] = {}  # (resource, device ID) -> uid it was answered for

    # ---- Allocate -------------------------------------------------------------------------------------
    def allocate(
        self, resource: Resource, requests: Sequence[Sequence[str]]
    ) -> list[api_pb2.ContainerAllocateResponse]:
        pods = self._source()
        with self._mutex:
            self._forget_gone(pods)
            pod = self._admitting(pods, resource, self._clock() + self._pod_wait)
            served = self._served_for(pod, resource)
            responses = [self._answer(resource, served, tuple(ids)) for ids in requests]
            self._served[pod.uid] = served
            log.info(
                "allocate pod=%s resource=%s devices=%s gpus=%s",
                pod.ref,
                resource.name,
                ";".join(",".join(ids) for ids in requests),
                ",".join(served.gpus),
            )
            if served.complete and self._confirm is not None:
                answered = frozenset(d for ids in served.answers for d in ids)
                self._confirm.after_allocate(pod, resource.name, answered, served.allocation())
            return responses

    def _source(self) -> PodSource:
        if self._pods is None:
            raise AllocationError(
                f"no Kubernetes API configured (standalone mode): cannot read the pod's {GPU_ASSIGNMENT}"
            )
        return self._pods

    def _answer(
        self, resource: Resource, served: Served, ids: tuple[str, ...]
    ) -> api_pb2.ContainerAllocateResponse:
        pod = served.pod
        if served.granted is None:
            gpus = self._free_gpus(resource, pod, ids)
            response = container_response(gpus, fractional=False)
        elif resource.kind == "slice":
            if len(ids) != len(served.granted):
                raise AllocationError(
                    f"pod {pod.ref} asks for {len(ids)} {resource.name} but the scheduler assigned it "
                    f"{len(served.granted)} GPU(s); the slice limit must equal gpu-fraction-num-devices"
                )
            offered = {resource.gpu_uuid(d) for d in ids}
            if offered != {g.uuid for g in served.granted}:
                # Harmless for the pod (the assignment decides), but the kubelet's slice count drifts.
                log.warning("allocate pod=%s kubelet chose slices of %s, assigned %s", pod.ref, sorted(offered),
                            [g.uuid for g in served.granted])  # fmt: skip
            gpus = list(served.granted)
            response = container_response(gpus, fractional=True, mps_pipe_dir=self._mps)
        else:
            by_uuid = {g.uuid: g for g in served.granted}
            stray = [d for d in ids if d not in by_uuid]
            if stray:
                raise AllocationError(
                    f"the kubelet offered GPU {', '.join(stray)} to pod {pod.ref}, which the scheduler "
                    f"assigned {', '.join(by_uuid)}"
                )
            gpus = [by_uuid[d] for d in ids]
            response = container_response(gpus, fractional=False)
        served.answers.append(ids)
        for g in gpus:
            served.gpus[g.uuid] = g.gpu.index
        for d in ids:
            self._holder[(resource.name, d)] = pod.uid
        return response

    # ---- finding the pod the kubelet admits ------------------------------------------------------------
    def _admitting(self, pods: PodSource, resource: Resource, deadline: float) -> PodView:
        """The pod the kubelet is admitting for `resource` (waits up to `deadline` for the watch to show it:
        the kubelet may have seen it first)."""
        while True:
            seen = pods.version
            listed = self._listed()
            waiting = [p for p in pods.pods() if self._waits(p, resource, listed)]
            if len(waiting) > 1:  # a pod deleted before the kubelet admitted it is never admitted
                waiting = [p for p in waiting if not p.deleting] or waiting
            if len(waiting) == 1:
                return waiting[0]
            if waiting:
                names = ", ".join(sorted(p.ref for p in waiting)[:5])
                how = "the kubelet lists" if listed is not None else "without the kubelet's PodResources API,"
                raise AllocationError(
                    f"cannot tell which pod the kubelet is admitting for {resource.name} on node "
                    f"{self._node}: {how} {len(waiting)} pods waiting for it ({names})"
                )
            left = deadline - self._clock()
            if left <= 0:
                raise AllocationError(
                    f"no pod on node {self._node} waits for {resource.name}: the kubelet admits a pod the "
                    f"device plugin's watch does not show here within {self._pod_wait:.0f} s"
                )
            pods.wait_change(seen, min(left, POLL_S))

    def _listed(self) -> dict[tuple[str, str], HeldDevices] | None:
        """The kubelet's active pods and what they hold; None when its PodResources API cannot be asked."""
        if self._kubelet is None:
            return None
        try:
            return {h.key: h for h in self._kubelet.list()}
        except KubeletPodsError as exc:
            log.warning("%s; finding the pod from the watch alone", exc)
            return None

    def _waits(
        self, pod: PodView, resource: Resource, listed: dict[tuple[str, str], HeldDevices] | None
    ) -> bool:
        """Whether the kubelet may be admitting `pod` for `resource` now."""
        if pod.terminal or not pod.asks(resource.name):
            return False
        served = self._served.get(pod.uid)
        if served is not None and served.resource == resource.name and served.complete:
            return False
        listed_asking = [c for c in pod.asking(resource.name) if c.kind != "init"]
        if listed is None or not listed_asking:
            # No list to read (or only plain init containers ask, which the kubelet does not list): the
            # kubelet reports container statuses once it has admitted a pod.
            return not pod.started and (listed is None or (pod.namespace, pod.name) in listed)
        held = listed.get((pod.namespace, pod.name))
        if held is None:
            return False  # the kubelet does not know it (yet): not the pod it admits
        return any(not held.of(c.name, resource.name) for c in listed_asking)

    # ---- what a pod gets ---------------------------------------------------------------------------------
    def _served_for(self, pod: PodView, resource: Resource) -> Served:
        served = self._served.get(pod.uid)
        if served is not None and served.resource == resource.name:
            return served
        if not pod.placed:
            if resource.kind == "slice":
                raise AllocationError(
                    f"pod {pod.ref} asks for {resource.name} but was not placed by the Tessera scheduler "
                    f"(it has no {GPU_ASSIGNMENT}); {GPU_SLICE_RESOURCE} is served to its pods only"
                )
            return Served(pod, resource.name, None)
        granted = self._granted(pod)
        whole = all(g.assigned.milli == MILLI_PER_GPU for g in granted)
        if resource.kind == "slice" and whole:
            raise AllocationError(
                f"pod {pod.ref} was assigned whole GPUs but its container asks for {resource.name}"
            )
        if resource.kind == "whole" and not whole:
            raise AllocationError(
                f"pod {pod.ref} was assigned a GPU fraction but its container asks for whole GPUs"
            )
        return Served(pod, resource.name, tuple(granted))

    def _granted(self, pod: PodView) -> list[GrantedGPU]:
        """The pod's assignment resolved against this node's GPUs; AllocationError when it cannot be used."""
        ref = pod.ref
        try:
            assignment = pod.assignment()
        except ValueError as exc:
            raise AllocationError(f"pod {ref}: {exc}") from None
        if assignment.node != self._node:
            raise AllocationError(
                f"pod {ref} is assigned to node {assignment.node} but this is node {self._node}"
            )
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
        return granted

    def _free_gpus(self, resource: Resource, pod: PodView, ids: tuple[str, ...]) -> list[GrantedGPU]:
        """The GPUs the kubelet chose for a pod Tessera did not place, each checked free: not assigned to a
        pod the scheduler placed here, not held by another pod."""
        busy = self._busy(exclude=pod)
        out = []
        for d in ids:
            gpu = self._inventory.by_uuid(resource.gpu_uuid(d))
            if gpu is None:
                raise AllocationError(f"unknown {resource.name} device {d} on this node")
            if not gpu.healthy:
                raise AllocationError(f"GPU {gpu.uuid} is unhealthy ({gpu.reason or 'unknown'})")
            if gpu.uuid in busy:
                raise AllocationError(
                    f"pod {pod.ref} was not placed by the Tessera scheduler and gets only a GPU nobody uses, "
                    f"but the kubelet offered {gpu.uuid}, which {busy[gpu.uuid]} (no GPU of node {self._node} "
                    "is free for it)"
                )
            out.append(GrantedGPU.whole(gpu))
        return out

    def _busy(self, exclude: PodView | None = None) -> dict[str, str]:
        """GPUs in use on this node, by uuid, with who uses them: assigned to a pod the scheduler placed that
        is not finished, or holding devices of ours (as the kubelet lists them, or as answered here)."""
        pods = self._source()
        busy: dict[str, str] = {}
        skip = exclude.uid if exclude is not None else None
        for p in pods.pods():
            if p.uid == skip or p.terminal or not p.placed:
                continue
            try:
                assignment = p.assignment()
            except ValueError:
                continue
            if assignment.node != self._node:
                continue
            for a in assignment.gpus:
                gpu = self._inventory.by_uuid(a.uuid) if a.uuid else self._inventory.by_index(a.index)
                if gpu is not None:
                    busy.setdefault(gpu.uuid, f"the scheduler assigned to pod {p.ref}")
        for uid, served in self._served.items():
            if uid != skip:
                for uuid in served.gpus:
                    busy.setdefault(uuid, f"pod {served.pod.ref} was given")
        listed = self._listed()
        for held in (listed or {}).values():
            if exclude is not None and held.key == (exclude.namespace, exclude.name):
                continue
            for by_resource in held.containers.values():
                for devices in by_resource.values():
                    for d in devices:  # a whole GPU's ID is its uuid, a slice's `<uuid>::<k>`
                        gpu = self._inventory.by_uuid(d.rpartition(SLICE_SEPARATOR)[0] or d)
                        if gpu is not None:
                            busy.setdefault(gpu.uuid, f"pod {held.namespace}/{held.name} holds")
        return busy

    def _forget_gone(self, pods: PodSource) -> None:
        """Drop what was answered for pods the watch no longer shows (deleted)."""
        gone = [uid for uid in self._served if pods.get(uid) is None]
        if not gone:
            return
        for uid in gone:
            del self._served[uid]
        dropped = set(gone)
        for key in [k for k, uid in self._holder.items() if uid in dropped]:
            del self._holder[key]

    # ---- GetPreferredAllocation ----------------------------------------------------------------------
    def preferred(
        self, resource: Resource, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """The assigned GPUs (or their slices) of the pod being admitted first; for a pod Tessera did not
        place, GPUs nobody uses. Never fails (Allocate does)."""
        wanted: list[str] = []
        if self._pods is not None:
            try:
                with self._mutex:
                    pod = self._admitting(self._pods, resource, self._clock() + min(self._pod_wait, 1.0))
                    if pod.placed:
                        wanted = [g.uuid for g in self._granted(pod)]
                    else:
                        busy = self._busy(exclude=pod)
                        wanted = [g.uuid for g in self._inventory.gpus() if g.healthy and g.uuid not in busy]
            except AllocationError as exc:
                log.debug("preferred allocation without a pod: %s", exc)
        chosen = list(must_include)[:size]
        free = [d for d in available if d not in chosen]
        for uuid in wanted:
            for pick in [d for d in free if resource.gpu_uuid(d) == uuid]:
                if len(chosen) >= size:
                    break
                chosen.append(pick)
                free.remove(pick)
                if resource.kind == "slice":
                    break  # one slice of each assigned GPU
        chosen.extend(free[: max(0, size - len(chosen))])
        return chosen

    # ---- PreStartContainer ----------------------------------------------------------------------------
    def pre_start(self, resource: Resource, ids: Sequence[str]) -> None:
        """Let the container start only if the kubelet gave its devices to the pod they were answered for;
        then the pod is confirmed (marked allocated)."""
        pods = self._source()
        with self._mutex:
            answered_for = next(
                (uid for d in ids if (uid := self._holder.get((resource.name, d))) is not None), None
            )
            if self._kubelet is None:
                log.warning("prestart devices=%s: no PodResources API to confirm them with", ",".join(ids))
                return
            try:
                listed = self._kubelet.list()
            except KubeletPodsError as exc:
                raise AllocationError(
                    f"cannot confirm which pod holds devices {', '.join(ids)}: {exc}"
                ) from None
            holders = [h for h in listed if h.devices(resource.name) & set(ids)]
            if not holders:
                # Held by a plain init container (the kubelet does not list those): nothing to compare.
                log.info("prestart devices=%s held by no listed container", ",".join(ids))
                return
            if len(holders) > 1:
                names = ", ".join(f"{h.namespace}/{h.name}" for h in holders)
                raise AllocationError(f"the kubelet lists devices {', '.join(ids)} as held by pods {names}")
            held = holders[0]
            pod = pods.by_name(held.namespace, held.name)
            if pod is None:
                raise AllocationError(f"pod {held.namespace}/{held.name} holds devices {', '.join(ids)} but the "
                                      "device plugin's watch does not show it on this node")  # fmt: skip
            if answered_for is not None and answered_for != pod.uid:
                other = self._served.get(answered_for)
                raise AllocationError(
                    f"the kubelet gave devices {', '.join(ids)} to pod {pod.ref}, but Allocate answered them "
                    f"with the GPUs of pod {other.pod.ref if other else answered_for}: {pod.ref}'s container "
                    "must not start on another pod's GPUs (delete the pod to have it admitted again)"
                )
            allocation = self._confirmed(pod, resource, held)
        if self._confirm is not None:
            self._confirm.confirmed(pod, allocation)

    def _confirmed(self, pod: PodView, resource: Resource, held: HeldDevices) -> GPUAllocation:
        """What the pod got, now that the kubelet shows it holding its devices."""
        served = self._served.get(pod.uid)
        if served is not None and served.resource == resource.name:
            return served.allocation()
        # Answered by an earlier process of this plugin: the assignment says what it got, for a placed pod.
        if pod.placed:
            granted = self._granted(pod)
            uuids = {resource.gpu_uuid(d) for d in held.devices(resource.name)}
            if not uuids <= {g.uuid for g in granted}:
                raise AllocationError(
                    f"pod {pod.ref} holds devices of GPU {', '.join(sorted(uuids))}, but the scheduler "
                    f"assigned it {', '.join(g.uuid for g in granted)}"
                )
            return GPUAllocation(gpus=[AllocatedGPU(index=g.gpu.index, uuid=g.uuid) for g in granted])
        gpus = [
            g for d in sorted(held.devices(resource.name)) if (g := self._inventory.by_uuid(d)) is not None
        ]
        return GPUAllocation(gpus=[AllocatedGPU(index=g.index, uuid=g.uuid) for g in gpus])
