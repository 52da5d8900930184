"""In-memory stand-ins for the plugin's two sources, for the unit tests of its decisions
(tests/device_plugin/test_plugin_allocator.py): this node's pods as its watch shows them (`MemPods`), and the
kubelet's PodResources answers (`MemKubelet`). They serve what a real kubelet cannot be made to produce on
demand: a watch that lags behind the kubelet, two pods that look alike, devices given to another pod than
the one they were answered for, a plugin restarted between Allocate and PreStartContainer. Admission itself
is tested on real kubelets (tests/sandbox/test_handoff.py)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any

from device_plugin.cluster import ClusterError
from device_plugin.kubelet_pods import HeldDevices, KubeletPodsError
from device_plugin.pods import PodView, pod_view
from scheduler.api.allocation import GPUAllocation
from scheduler.api.assignment import AssignedGPU, GPUAssignment
from scheduler.api.keys import GPU_ALLOCATED, GPU_ASSIGNMENT

NODE = "node-a"


def pod_obj(
    name: str,
    containers: list[dict[str, Any]],
    *,
    init: list[dict[str, Any]] | None = None,
    gpus: list[AssignedGPU] | None = None,
    node: str = NODE,
    assigned_node: str | None = None,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod bound to `node`, with the scheduler's assignment of `gpus` (None: Tessera did not place it)."""
    meta: dict[str, Any] = {"namespace": "team", "name": name, "uid": f"uid-{name}",
                            "annotations": dict(annotations or {})}  # fmt: skip
    if gpus is not None:
        meta["annotations"][GPU_ASSIGNMENT] = GPUAssignment(
            node=assigned_node or node, gpus=gpus
        ).to_annotation()
    spec: dict[str, Any] = {"nodeName": node, "containers": containers}
    if init:
        spec["initContainers"] = init
    return {"metadata": meta, "spec": spec, "status": status or {"phase": "Pending"}}


def container(name: str, resource: str | None = None, count: int = 1, **extra: Any) -> dict[str, Any]:
    limits = {resource: str(count)} if resource else {}
    return {"name": name, "image": "cuda", "resources": {"limits": limits}, **extra}


class MemPods:
    """This node's pods, as the plugin's watch (`watch.PodWatch`) would show them."""

    def __init__(self, clock: list[float] | None = None) -> None:
        self._pods: dict[str, PodView] = {}
        self._version = 0
        self.clock = clock if clock is not None else [0.0]
        self.arriving: list[dict[str, Any]] = []  # shown once a reader has waited (a lagging watch)

    def add(self, obj: dict[str, Any]) -> PodView:
        view = pod_view(obj)
        self._pods[view.uid] = view
        self._version += 1
        return view

    def set(self, view: PodView) -> None:
        self._pods[view.uid] = view
        self._version += 1

    def remove(self, uid: str) -> None:
        self._pods.pop(uid, None)
        self._version += 1

    @property
    def version(self) -> int:
        return self._version

    def pods(self) -> list[PodView]:
        return list(self._pods.values())

    def get(self, uid: str) -> PodView | None:
        return self._pods.get(uid)

    def by_name(self, namespace: str, name: str) -> PodView | None:
        return next((p for p in self._pods.values() if (p.namespace, p.name) == (namespace, name)), None)

    def wait_change(self, seen: int, timeout_s: float) -> int:
        self.clock[0] += timeout_s  # the time passes at once
        if self.arriving:
            self.add(self.arriving.pop(0))
        return self._version


@dataclass
class MemKubelet:
    """What the kubelet's PodResources API answers: the pods it knows, each with the devices it holds."""

    held: dict[tuple[str, str], dict[str, dict[str, frozenset[str]]]] = field(default_factory=dict)
    down: bool = False

    def admit(self, name: str, **containers: dict[str, list[str]]) -> None:
        """The kubelet knows pod team/`name`; its listed containers hold these devices (per resource)."""
        self.held[("team", name)] = {
            c: {r: frozenset(ids) for r, ids in d.items()} for c, d in containers.items()
        }

    def list(self) -> list[HeldDevices]:
        if self.down:
            raise KubeletPodsError("PodResources List failed: connection refused")
        return [HeldDevices(ns, name, c) for (ns, name), c in self.held.items()]

    def get(self, namespace: str, name: str) -> HeldDevices | None:
        if self.down:
            raise KubeletPodsError("PodResources Get failed: connection refused")
        c = self.held.get((namespace, name))
        return None if c is None else HeldDevices(namespace, name, c)


@dataclass
class MemMarker:
    """Records the marks the plugin writes (and applies them to `pods`, as the watch would show them)."""

    pods: MemPods
    marks: dict[str, GPUAllocation] = field(default_factory=dict)
    fail: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def mark_allocated(self, pod: PodView, allocation: GPUAllocation) -> None:
        if self.fail:
            raise ClusterError("HTTP 500: etcd is on fire")
        with self._lock:
            self.marks[pod.ref] = allocation
            current = self.pods.get(pod.uid)
            if current is not None:
                self.pods.set(replace(current, annotations={**current.annotations,
                                                             GPU_ALLOCATED: allocation.to_annotation()}))  # fmt: skip
