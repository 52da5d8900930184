"""For fractional pods: what Tessera's device plugin writes once the kubelet has called Allocate for the pod
holding a node's bind lock (mark the pod allocated, free the lock: two requests), so that the next GPU pod
can be bound to that node. There are no kubelets (as in scheduler_perf), so this stand-in "allocates" a pod
as soon as the watch shows it bound to the node whose lock names it. Its requests are counted apart.

On a cluster every node has its own device plugin, so nodes are served side by side: `workers` nodes at
a time here (with 4, the stand-in itself was the limit of the fractional benchmark: about 45 pods/s), and
its two requests go without the generated client's model layer (`raw.py`), as the scheduler's do."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.api.bind_lock import BindLock
from scheduler.api.keys import BIND_LOCK, GPU_ALLOCATED
from scheduler.api.meta import json_pointer
from scheduler.bench.e2e.load import BindWatch
from scheduler.kube import raw as rawapi
from scheduler.kube.event_queue import ResourceEvent
from scheduler.kube.informer import Informer, WatchTarget

WORKERS = 32  # nodes served at a time


class DevicePluginStandIn:
    def __init__(
        self, api: client.ApiClient, pods: BindWatch, nodes: set[str], *, workers: int = WORKERS
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.pods = pods
        self.nodes = nodes
        self.requests = 0
        self.served = 0
        self.errors: list[str] = []
        self._locked: dict[str, str] = {}  # node -> its lock annotation, not yet served
        self._serving: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=workers)
        self._thread = threading.Thread(target=self._run, name="device-plugin-standin", daemon=True)
        target = WatchTarget("Node", self.core.list_node)
        self.informer = Informer(target, self._node_changed, watch_timeout_s=3600)

    def start(self) -> DevicePluginStandIn:
        self.informer.start()
        self.informer.synced.wait(30)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=True)
        self.informer.stop()

    def wait_idle(self, timeout_s: float) -> bool:
        """Until no lock the watch showed is left to serve (seen so twice, 50 ms apart); whether it was."""
        deadline = time.monotonic() + timeout_s
        quiet = 0
        while time.monotonic() < deadline:
            with self._lock:
                idle = not self._locked and not self._serving
            quiet = quiet + 1 if idle else 0
            if quiet >= 2:
                return True
            time.sleep(0.05)
        return False

    def _node_changed(self, ev: ResourceEvent) -> None:
        name = str(ev.obj["metadata"]["name"])
        if name not in self.nodes:
            return
        raw = (ev.obj["metadata"].get("annotations") or {}).get(BIND_LOCK)
        with self._lock:
            if raw and ev.type != "DELETED":
                self._locked[name] = raw
            else:
                self._locked.pop(name, None)

    def _run(self) -> None:
        """Serve each locked node once the watch shows the lock's pod bound there (the kubelet's turn)."""
        while not self._stop.wait(0.005):
            with self._lock:
                todo = [(n, raw) for n, raw in self._locked.items() if n not in self._serving]
            for node, raw in todo:
                try:
                    lock = BindLock.from_annotation(raw)
                except ValueError:
                    continue
                if self.pods.nodes.get(lock.name) != node:
                    continue
                with self._lock:
                    self._serving.add(node)
                self._pool.submit(self._serve, node, raw, lock)

    def _serve(self, node: str, raw: str, lock: BindLock) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            mark = {"metadata": {"annotations": {GPU_ALLOCATED: now}}}
            pod = rawapi.pod_path(lock.namespace, lock.name)
            rawapi.request(self.api, "PATCH", pod, mark, content_type=rawapi.MERGE_PATCH)
            ops = [{"op": "test", "path": f"/metadata/annotations/{json_pointer(BIND_LOCK)}", "value": raw},
                   {"op": "remove", "path": f"/metadata/annotations/{json_pointer(BIND_LOCK)}"}]  # fmt: skip
            rawapi.request(self.api, "PATCH", rawapi.node_path(node), ops, content_type=rawapi.JSON_PATCH)
            served = 1
        except ApiException as exc:
            served = 0
            if exc.status != 422:  # the lock changed meanwhile: nothing to free
                self.errors.append(f"{node}: {exc.status} {exc.reason}")
        with self._lock:
            self.requests += 2
            self.served += served
            self._serving.discard(node)
            if self._locked.get(node) == raw:
                self._locked.pop(node, None)
