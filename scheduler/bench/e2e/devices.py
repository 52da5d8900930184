"""For pods that wait for Tessera's device plugin after their bind (fractions; whole GPUs on nodes it
serves): what the plugin writes once the kubelet holds a pod's devices, `tessera.dev/gpu-allocated` with
the GPUs it got (one request), so that the scheduler lets the pod's node take the next such pod. There are
no kubelets (as in scheduler_perf), so this stand-in "allocates" a pod as soon as the watch shows it bound.
Its requests are counted apart.

On a cluster every node has its own device plugin, so nodes are served side by side: `workers` requests at
a time here, each without the generated client's model layer (`raw.py`), as the scheduler's."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.api.allocation import AllocatedGPU, GPUAllocation
from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ALLOCATED, GPU_ASSIGNMENT
from scheduler.bench.e2e.load import BindWatch
from scheduler.kube import raw as rawapi

WORKERS = 32  # marks written at a time


class DevicePluginStandIn:
    def __init__(self, api: client.ApiClient, pods: BindWatch, *, workers: int = WORKERS) -> None:
        self.api = api
        self.requests = 0
        self.served = 0
        self.errors: list[str] = []
        self.marked: dict[str, float] = {}  # pod name -> when its mark was written (perf_counter)
        self._pending = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=workers)
        pods.on_bound.append(self._bound)

    def start(self) -> DevicePluginStandIn:
        return self

    def stop(self) -> None:
        self._pool.shutdown(wait=True)

    def wait_idle(self, timeout_s: float) -> bool:
        """Until every pod the watch showed bound is marked; whether it got there."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending:
                    return True
            time.sleep(0.05)
        return False

    def _bound(self, pod: dict[str, Any]) -> None:
        """The watch shows `pod` bound: the kubelet would admit it now (on the watch's thread: hand over)."""
        raw_assignment = (pod["metadata"].get("annotations") or {}).get(GPU_ASSIGNMENT)
        if not raw_assignment:
            return
        with self._lock:
            self._pending += 1
        self._pool.submit(self._mark, pod, raw_assignment)

    def _mark(self, pod: dict[str, Any], raw_assignment: str) -> None:
        meta = pod["metadata"]
        served = 0
        try:
            assignment = GPUAssignment.from_annotation(raw_assignment)
            gpus = [AllocatedGPU(index=g.index, uuid=g.uuid) for g in assignment.gpus]
            body = {"metadata": {"uid": meta["uid"],
                                 "annotations": {GPU_ALLOCATED: GPUAllocation(gpus=gpus).to_annotation()}}}  # fmt: skip
            path = rawapi.pod_path(meta["namespace"], meta["name"])
            rawapi.request(self.api, "PATCH", path, body, content_type=rawapi.MERGE_PATCH)
            served = 1
            with self._lock:
                self.marked[meta["name"]] = time.perf_counter()
        except (ApiException, ValueError) as exc:
            self.errors.append(f"{meta.get('name')}: {str(exc).splitlines()[0]}")
        with self._lock:
            self.requests += 1
            self.served += served
            self._pending -= 1
