"""Shared helpers for the scheduler's Kubernetes-side tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from scheduler.api.bind_lock import BindLock
from scheduler.api.keys import BIND_LOCK, GPU_ALLOCATED, GPU_ASSIGNMENT


def wait_for(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.02) -> Any:
    """Poll until `predicate()` is truthy; return its value or fail the test with a clear message."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"condition not met within {timeout}s: {getattr(predicate, '__name__', predicate)}"
            )
        time.sleep(interval)


def pod_body(
    name: str,
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    scheduler: str = "tessera",
    limits: dict[str, str] | None = None,
    node: str | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if limits:
        container["resources"] = {"limits": limits}
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [container]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": annotations or {},
            "labels": labels or {},
        },
        "spec": spec,
    }


def node_body(
    name: str,
    *,
    gpus: int = 0,
    cpu: str = "32",
    memory: str = "256Gi",
    labels: dict[str, str] | None = None,
    gpu_memory_mib: int = 81920,
    gpu_product: str = "NVIDIA-H100-80GB-HBM3",
) -> dict[str, Any]:
    capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
    labels = dict(labels or {})
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
        labels.setdefault("nvidia.com/gpu.product", gpu_product)
        labels.setdefault("nvidia.com/gpu.memory", str(gpu_memory_mib))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


class FakeKubelet:
    """Plays the kubelets and Tessera's device plugin on the fake API server: a pod bound to a node is
    "allocated" when it holds that node's bind lock (or needs no GPU): it gets `tessera.dev/gpu-allocated`,
    the lock is freed and the pod turns Running."""

    def __init__(self, api: Any, interval: float = 0.02) -> None:
        self.api = api
        self.interval = interval
        self.allocated: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-kubelet", daemon=True)

    def start(self) -> FakeKubelet:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for pod in self.api.objects("pods"):
                self._serve(pod)

    def _serve(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") != "Pending" or meta.get("deletionTimestamp"):
            return
        annotations = meta.get("annotations") or {}
        if GPU_ASSIGNMENT in annotations:
            node_obj = self.api.find("nodes", node)
            raw = ((node_obj or {}).get("metadata", {}).get("annotations") or {}).get(BIND_LOCK)
            if not raw or BindLock.from_annotation(raw).uid != meta["uid"]:
                return  # not (yet) this pod's turn: the kubelet would not have called Allocate for it

            def unlock(n: dict[str, Any]) -> None:
                n["metadata"]["annotations"].pop(BIND_LOCK, None)

            self.api.modify("nodes", node, unlock)

        def run(p: dict[str, Any]) -> None:
            p["metadata"].setdefault("annotations", {})[GPU_ALLOCATED] = "true"
            p.setdefault("status", {})["phase"] = "Running"

        self.api.modify("pods", meta["name"], run, meta["namespace"])
        self.allocated.append(f"{meta['namespace']}/{meta['name']}")
