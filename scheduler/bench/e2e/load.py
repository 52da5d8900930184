"""The client side of the benchmark: the pods (and PodGroups) it creates, at a steady rate or as fast as
it can, and what it watches: when each pod got its node."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from kubernetes import client

from scheduler.api.keys import (
    API_VERSION,
    GPU_ASSIGNMENT,
    GPU_FRACTION,
    POD_GROUP,
    SCHEDULER_NAME,
    WHOLE_GPU_RESOURCE,
)
from scheduler.bench.e2e.config import E2EConfig
from scheduler.kube import raw
from scheduler.kube.event_queue import ResourceEvent
from scheduler.kube.informer import Informer, WatchTarget

Obj = dict[str, Any]
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


@dataclass(frozen=True)
class Item:
    """One object to create: a pod, or the PodGroup of the gang whose members follow it."""

    kind: str  # "Pod" | "PodGroup"
    body: Obj

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


def pod_body(cfg: E2EConfig, name: str, *, fraction: bool, group: str | None, cpu_only: bool = False) -> Obj:
    annotations: dict[str, str] = {}
    limits: dict[str, str] = {}
    if fraction:
        annotations[GPU_FRACTION] = f"{cfg.fraction:g}"
    elif not cpu_only:
        limits[WHOLE_GPU_RESOURCE] = "1"
    if group:
        annotations[POD_GROUP] = group
    spec: Obj = {"containers": [{"name": "main", "image": PAUSE_IMAGE,
                                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": limits}}]}  # fmt: skip
    if cfg.scheduler == "tessera":
        spec["schedulerName"] = SCHEDULER_NAME
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": spec,
    }


ZONE_LABEL = "topology.kubernetes.io/zone"
ANTI_REPLICAS = 4  # replicas of each anti-affinity Deployment (one per node)
SPREAD_REPLICAS = 6  # replicas of each zone-spread Deployment (two per zone)
MODEL = "NVIDIA-H100-80GB-HBM3"  # the GPU model the model-affine pods require (half the nodes: world.py)


def affinity_pod(cfg: E2EConfig, i: int) -> Obj:
    """Pod `i` of the affinity workload, whole GPUs: in turn a replica of an anti-affinity Deployment
    (required, on the hostname), of a zone-spread Deployment (DoNotSchedule, maxSkew 1), or a pod that
    requires a GPU model by node affinity."""
    kind, n = i % 3, i // 3
    body = pod_body(cfg, f"pod-{i:06d}", fraction=False, group=None)
    spec = body["spec"]
    if kind == 0:
        app = f"anti-{n // ANTI_REPLICAS:05d}"
        term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    elif kind == 1:
        app = f"spread-{n // SPREAD_REPLICAS:05d}"
        spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": ZONE_LABEL,
                                              "whenUnsatisfiable": "DoNotSchedule",
                                              "labelSelector": {"matchLabels": {"app": app}}}]  # fmt: skip
    else:
        app = "model"
        expr = {"key": "nvidia.com/gpu.product", "operator": "In", "values": [MODEL]}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [expr]}]}}}  # fmt: skip
    body["metadata"]["labels"] = {"app": app}
    return body


def items(cfg: E2EConfig) -> Iterator[Item]:
    """The pods in creation order; a gang's PodGroup just before its members. Fractional and CPU-only pods
    are spread evenly through the whole-GPU ones."""
    if cfg.affinity:
        for i in range(cfg.pods):
            yield Item("Pod", affinity_pod(cfg, i))
        return

    if cfg.gang_size > 1:
        for g in range(cfg.pods // cfg.gang_size):
            group = f"gang-{g:05d}"
            yield Item("PodGroup", {"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": {"name": group},
                                    "spec": {"minMember": cfg.gang_size}})  # fmt: skip
            for m in range(cfg.gang_size):
                yield Item("Pod", pod_body(cfg, f"{group}-{m}", fraction=False, group=group))
        return
    owed, owed_cpu = 0.0, 0.0
    for i in range(cfg.pods):
        owed += cfg.fraction_share
        owed_cpu += cfg.cpu_only_share
        fraction = owed >= 1 - 1e-9
        owed -= 1.0 if fraction else 0.0
        cpu_only = not fraction and owed_cpu >= 1 - 1e-9
        owed_cpu -= 1.0 if cpu_only else 0.0
        yield Item("Pod", pod_body(cfg, f"pod-{i:06d}", fraction=fraction, group=None, cpu_only=cpu_only))


@dataclass
class Creator:
    """Creates the items from `creators` threads; with a `rate`, item i goes at start + i / rate."""

    api: client.ApiClient
    namespace: str
    cfg: E2EConfig
    created: dict[str, float] = field(default_factory=dict)  # pod name -> when its create was sent
    errors: list[str] = field(default_factory=list)
    requests: int = 0
    first_s: float = 0.0
    last_s: float = 0.0

    def run(self) -> None:
        work = list(items(self.cfg))
        ns = quote(self.namespace, safe="")
        paths = {"Pod": f"/api/v1/namespaces/{ns}/pods",
                 "PodGroup": f"/apis/{API_VERSION}/namespaces/{ns}/podgroups"}  # fmt: skip
        lock = threading.Lock()
        nxt = iter(range(len(work)))
        self.first_s = start = time.perf_counter()

        def worker() -> None:
            while True:
                with lock:
                    i = next(nxt, None)
                if i is None:
                    return
                item = work[i]
                if self.cfg.rate > 0:
                    delay = start + i / self.cfg.rate - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                sent = time.perf_counter()
                try:
                    raw.request(self.api, "POST", paths[item.kind], item.body)
                    with lock:
                        if item.kind == "Pod":
                            self.created[item.name] = sent
                        self.requests += 1
                except (client.ApiException, OSError, ValueError) as exc:  # noted; the run goes on
                    with lock:
                        self.requests += 1
                        self.errors.append(f"{item.kind} {item.name}: {str(exc).splitlines()[0]}")

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(self.cfg.creators)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.last_s = time.perf_counter()


class BindWatch:
    """Watches the benchmark's pods (the scheduler's own informer code) and records when each got a node."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.bound: dict[str, float] = {}  # pod name -> when the watch showed its node
        self.nodes: dict[str, str] = {}
        self.assignments: dict[str, str] = {}  # pod name -> its tessera.dev/gpu-assignment as bound
        # Told of each pod once, when the watch first shows it bound (the pod as the watch has it).
        self.on_bound: list[Callable[[dict[str, Any]], None]] = []
        self._lock = threading.Lock()
        target = WatchTarget("Pod", client.CoreV1Api(api).list_namespaced_pod, (namespace,))
        self.informer = Informer(target, self._seen, watch_timeout_s=3600)

    def _seen(self, ev: ResourceEvent) -> None:
        now = time.perf_counter()
        node = (ev.obj.get("spec") or {}).get("nodeName")
        if node and ev.type != "DELETED":
            name = str(ev.obj["metadata"]["name"])
            with self._lock:
                first = name not in self.bound
                if first:
                    self.bound[name] = now
                    self.nodes[name] = node
                    raw = (ev.obj["metadata"].get("annotations") or {}).get(GPU_ASSIGNMENT)
                    if raw:
                        self.assignments[name] = raw
            if first:
                for listener in self.on_bound:
                    listener(ev.obj)

    def count(self) -> int:
        with self._lock:
            return len(self.bound)

    def start(self) -> BindWatch:
        self.informer.start()
        self.informer.synced.wait(30)
        return self

    def stop(self) -> None:
        self.informer.stop()
