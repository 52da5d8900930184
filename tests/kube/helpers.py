"""Pod and Node bodies for the scheduler's Kubernetes-side tests (the real API server's helpers are in
tests/controlplane/)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from scheduler.api.keys import GPU_SLICE_RESOURCE, MILLI_PER_GPU


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
    device_plugin: bool = True,
) -> dict[str, Any]:
    capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
    labels = dict(labels or {})
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
        if device_plugin:  # Tessera's device plugin runs there: it registers its slice resource
            capacity[GPU_SLICE_RESOURCE] = str(gpus * MILLI_PER_GPU)
        labels.setdefault("nvidia.com/gpu.product", gpu_product)
        labels.setdefault("nvidia.com/gpu.memory", str(gpu_memory_mib))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }
