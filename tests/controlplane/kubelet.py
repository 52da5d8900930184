"""A kubelet stand-in for the Kubernetes-level tests: no containers, only what the API sees of a kubelet.

For each pod bound to one of its nodes it does what the node would: when the pod has a GPU assignment and
the node runs Tessera's device plugin, it writes what the plugin writes once the kubelet holds the pod's
devices, with the plugin's own ServiceAccount and code (`device_plugin.cluster.KubePodCluster`: mark the pod
`tessera.dev/gpu-allocated` with its GPUs); then it reports the pod Running and Ready. A pod being deleted is
removed after `grace_s` (its graceful termination), or, with `grace_s=None`, after the grace period of its
deletion (`deletionGracePeriodSeconds`), as a real kubelet kills containers that do not stop. It follows the
API with watches (the scheduler's own `Informer`), never by polling lists.

The `tessera sandbox` kubelet stand-in goes further (the real gRPC socket, Allocate, node registration);
this one is for tests of the scheduler's side of the hand-off.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from device_plugin.cluster import ClusterError, KubePodCluster
from device_plugin.pods import pod_view
from scheduler.api.allocation import AllocatedGPU, GPUAllocation
from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT, GPU_FRACTION, GPU_MEMORY, GPU_SLICE_RESOURCE
from scheduler.kube.event_queue import EventQueue
from scheduler.kube.informer import Informer, WatchTarget


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeletStandIn:
    def __init__(
        self,
        admin: client.ApiClient,
        device_plugin: client.ApiClient,
        nodes: set[str],
        *,
        grace_s: float | None = 0,
    ) -> None:
        self.core = client.CoreV1Api(admin)
        self.plugin = KubePodCluster(client.CoreV1Api(device_plugin))
        self.nodes = nodes  # the test's node names (shared: nodes added later are served too)
        self.grace_s = grace_s
        self.allocated: list[str] = []  # "namespace/name" in the order the pods were started
        self.errors: list[str] = []
        self._started: set[str] = set()
        self._deleting: dict[str, float] = {}
        self._queue = EventQueue()
        self.pods = Informer(WatchTarget("Pod", self.core.list_pod_for_all_namespaces), self._queue.put)
        self.node_cache = Informer(WatchTarget("Node", self.core.list_node), self._queue.put)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelet-standin", daemon=True)

    def start(self) -> KubeletStandIn:
        self.pods.start()
        self.node_cache.start()
        self.pods.synced.wait(10)
        self.node_cache.synced.wait(10)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.pods.stop()
        self.node_cache.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._queue.wait(0.1)  # any pod or node change, or a tick for grace periods
            self._queue.drain()
            for pod in self.pods.snapshot():
                try:
                    self._serve(pod)
                except (ApiException, ClusterError) as exc:
                    self.errors.append(str(exc).splitlines()[0])

    def _serve(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        node, uid = spec.get("nodeName"), str(meta["uid"])
        if node not in self.nodes:
            return
        if meta.get("deletionTimestamp"):
            since = self._deleting.setdefault(uid, time.monotonic())
            grace = (
                self.grace_s
                if self.grace_s is not None
                else float(meta.get("deletionGracePeriodSeconds") or 0)
            )
            if time.monotonic() - since >= grace:  # the containers have stopped: confirm deletion
                options = client.V1DeleteOptions(
                    grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)
                )
                try:
                    self.core.delete_namespaced_pod(meta["name"], meta["namespace"], body=options)
                except ApiException as exc:
                    if exc.status not in (404, 409):  # gone already, or replaced
                        raise
            return
        if uid in self._started or (pod.get("status") or {}).get("phase") != "Pending":
            return
        annotations = meta.get("annotations") or {}
        node_obj = self.node_cache.get(node) or {}
        if GPU_ASSIGNMENT in annotations and _served_by_tessera(node_obj, annotations):
            assignment = GPUAssignment.from_annotation(annotations[GPU_ASSIGNMENT])
            gpus = [AllocatedGPU(index=g.index, uuid=g.uuid) for g in assignment.gpus]
            self.plugin.mark_allocated(pod_view(pod), GPUAllocation(gpus=gpus))
        ready = [{"type": t, "status": "True", "lastTransitionTime": _now()}
                 for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")]  # fmt: skip
        status = {"phase": "Running", "conditions": ready, "startTime": _now()}
        self.core.patch_namespaced_pod_status(
            meta["name"], meta["namespace"], {"status": status}, _preload_content=False
        )
        self._started.add(uid)
        self.allocated.append(f"{meta['namespace']}/{meta['name']}")


def _served_by_tessera(node: dict[str, Any], annotations: dict[str, str]) -> bool:
    """Whether the kubelet calls Tessera's device plugin for this pod: fractional pods, and whole GPUs on
    nodes where Tessera's device plugin registered."""
    capacity = (node.get("status") or {}).get("capacity") or {}
    return GPU_FRACTION in annotations or GPU_MEMORY in annotations or GPU_SLICE_RESOURCE in capacity
