"""`tessera bench events`: the cost of keeping the state current from watch events.

KAI Scheduler rebuilds its snapshot every cycle (2.2 s for 4,000 nodes / 140,000 pods in its field
report). Tessera applies watch events to resident arrays instead; this measures that, at the same scale:
N node objects, then P pod events (pods already running elsewhere, as a relist after a restart delivers
them: each that holds GPUs carries its `tessera.dev/gpu-assignment`, as the Kubernetes binder writes it),
then one update of every node.

Two figures, because they are different costs: `cache_apply_s` is the whole path (parse each pod dict,
validate its GPU request, account it in the arrays), `state_apply_s` only the array updates the parsed
events cause (`ClusterState.place` per pod), i.e. the snapshot-building cost proper.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from typing import Any

from scheduler.api.assignment import Admission, AssignedGPU, GPUAssignment
from scheduler.api.keys import DEFAULT_QUEUE, GPU_ASSIGNMENT
from scheduler.api.priority import resolve_priority
from scheduler.bench.runner import backend_label, current_rss_mib, peak_rss_mib, settle_heap
from scheduler.bench.workload import NODE_KINDS, PodShape, draw_shape, make_nodes, pod_object
from scheduler.cache.cache import Cache
from scheduler.cache.cluster import WatchEvent
from scheduler.cache.gc_pause import BULK, paused_gc
from scheduler.cache.handoff import HandoffRule
from scheduler.kube.informer import WatchTarget, list_page
from scheduler.kube.pod_decoder import pod_watch
from scheduler.model.types import Placement
from scheduler.state.backend import get_namespace
from scheduler.state.cluster_state import ClusterState

Obj = dict[str, Any]


@dataclass(frozen=True)
class EventsConfig:
    nodes: int = 5000
    gpus_per_node: int = 8
    pods: int = 150_000
    backend: str | None = None
    seed: int = 1
    # Pods as the API server returns them: what admission, the controllers and the kubelet add (the service
    # account's projected volume, the default NoExecute tolerations, the owner reference, labels, times,
    # the containers' image, command, environment, mounts and probes, their statuses), kept as the
    # scheduler's pod watch keeps them (a list's pages of JSON decoded by `kube/pod_decoder.py`, then
    # `informer.slim_pod`; timed apart as `watch_decode_cpu_s`). False: the bare pods (through the pod
    # watch's transform alone, as every pod the cache sees is).
    api_fields: bool = False


def running_pods(cfg: EventsConfig, nodes: list[Obj]) -> tuple[list[Obj], float]:
    """Pods bound round-robin over the nodes, each with an assignment that fits (first-fit per node); and
    the CPU seconds the pod watch took to decode and slim them (`api_fields`)."""
    rng = random.Random(cfg.seed)
    watch = pod_watch(lambda **_: None)  # the scheduler's pod watch, its pages handed to it here
    free = [[1000] * cfg.gpus_per_node for _ in nodes]
    mib = {model: m for model, m, _ in NODE_KINDS}
    pods: list[Obj] = []
    page: list[Obj] = []
    decode_s = 0.0
    i = 0
    priority, preemptible = resolve_priority(
        pod_object("any", PodShape(1))["spec"]["priorityClassName"], None
    )
    while len(pods) + len(page) < cfg.pods:
        # Small CPU requests so that 30 pods fit a node (KAI's report: 35 pods per node on average).
        drawn = draw_shape(rng)
        shape = PodShape(1, gpus=drawn.gpus, milli=drawn.milli)
        k = i % len(nodes)
        i += 1
        node = nodes[k]
        per_gpu = mib[node["metadata"]["labels"]["nvidia.com/gpu.product"]]
        want = [1000] * shape.gpus if shape.gpus else ([shape.milli] if shape.milli else [])
        slots = [j for j in range(cfg.gpus_per_node) if free[k][j] >= (want[0] if want else 0)][: len(want)]
        if len(slots) < len(want):
            shape, want, slots = PodShape(1), [], []  # no room for its GPUs there: a CPU-only pod instead
        for j, m in zip(slots, want, strict=True):
            free[k][j] -= m
        obj = pod_object(f"run-{len(pods) + len(page):06d}", shape)
        name = node["metadata"]["name"]
        gpus = [AssignedGPU(index=j, uuid=f"GPU-{name}-{j}", milli=m, memory_mib=m * per_gpu // 1000)
                for j, m in zip(slots, want, strict=True)]  # fmt: skip
        # As Tessera writes it: with what the pod was admitted with (a restarted scheduler pins its job to it);
        # none for a pod without GPUs (its Binding carries no assignment: scheduler/kube/bind_pool.py).
        admitted = Admission(queue=DEFAULT_QUEUE, job=f"pod:{obj['metadata']['namespace']}/{obj['metadata']['name']}",
                             priority=priority, preemptible=preemptible)  # fmt: skip
        if gpus:
            obj["metadata"]["annotations"][GPU_ASSIGNMENT] = GPUAssignment(
                node=name, gpus=gpus, admitted=admitted
            ).to_annotation()
        obj["spec"]["nodeName"] = name
        obj["status"] = {"phase": "Running"}
        if cfg.api_fields:  # served in pages of a list, decoded and kept as the pod watch does (a relist)
            as_served(obj, i)
            page.append(obj)
        else:  # bare: only the watch's transform
            page.append(obj)
        if len(page) == LIST_PAGE or len(pods) + len(page) == cfg.pods:
            decode_s += _list_page(watch, page, pods, cfg.api_fields)
            page = []
    return pods, decode_s


LIST_PAGE = 500  # the informer's page size


def _list_page(watch: WatchTarget, page: list[Obj], into: list[Obj], served: bool) -> float:
    """A page of the pod list, kept by the scheduler's pod watch into `into`: as the API server sends it
    (`served`: JSON, decoded by the watch), else the objects through the watch's transform alone; the CPU
    seconds the watch took."""
    data = b"" if not served else json.dumps({"kind": "PodList", "items": page}).encode()
    c0 = time.process_time()
    with paused_gc(BULK):  # as `Informer._list` does
        if served:
            list_page(watch, data, into)
        else:
            assert watch.transform is not None
            into.extend(map(watch.transform, page))
    return time.process_time() - c0


def as_served(obj: Obj, i: int) -> None:
    """Add to a pod what the API server (admission, managedFields), its controller (owner, labels) and its
    kubelet (statuses, addresses) add; `i` makes each pod's own values."""
    meta, spec = obj["metadata"], obj["spec"]
    rs = f"train-{i // 30:05d}"  # ReplicaSets of 30 pods
    meta["creationTimestamp"] = "2026-12-04T10:00:00Z"
    meta["managedFields"] = [  # what the API server records of who wrote which field
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
         "time": "2026-12-04T10:00:00Z", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}, "f:ownerReferences": {}},
                      "f:spec": {"f:containers": {'k:{"name":"main"}': {".": {}, "f:image": {}}}}}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-12-04T10:00:06Z",
         "fieldsType": "FieldsV1", "subresource": "status",
         "fieldsV1": {"f:status": {"f:conditions": {}, "f:phase": {}}}},
    ]  # fmt: skip
    meta["labels"] = {"app": "train", "pod-template-hash": f"{i // 30:08x}"}
    meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                                "uid": f"uid-{rs}", "controller": True, "blockOwnerDeletion": True}]  # fmt: skip
    spec["volumes"] = [{
        "name": f"kube-api-access-{i:05x}",
        "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
        ]},
    }]  # fmt: skip
    for c in spec["containers"]:
        c["volumeMounts"] = [{"name": spec["volumes"][0]["name"], "readOnly": True,
                              "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]  # fmt: skip
    spec["tolerations"] = [
        {
            "key": f"node.kubernetes.io/{k}",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        }
        for k in ("not-ready", "unreachable")
    ]
    obj["status"]["startTime"] = "2026-12-04T10:00:05Z"
    for c in spec["containers"]:
        c.update(image="registry.example.com/train:1.2", imagePullPolicy="IfNotPresent",
                 command=["python", "train.py"], args=["--config", f"/etc/train/{i % 7}.yaml"],
                 env=[{"name": "RANK", "value": str(i % 8)},
                      {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                 livenessProbe={"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
                 terminationMessagePath="/dev/termination-log", terminationMessagePolicy="File")  # fmt: skip
    obj["status"].update(
        conditions=[{"type": t, "status": "True", "lastTransitionTime": "2026-12-04T10:00:06Z"}
                    for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
        containerStatuses=[{"name": c["name"], "ready": True, "restartCount": 0, "started": True,
                            "image": c["image"], "imageID": f"sha256:{i:064x}", "containerID": f"containerd://{i:064x}",
                            "state": {"running": {"startedAt": "2026-12-04T10:00:06Z"}}} for c in spec["containers"]],
        podIP=f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", hostIP="192.0.2.1", qosClass="Burstable",
    )  # fmt: skip


def run_events(cfg: EventsConfig) -> dict[str, Any]:
    xp = get_namespace(cfg.backend, problem_gpus=cfg.nodes * cfg.gpus_per_node)
    nodes = make_nodes(cfg.nodes, cfg.gpus_per_node)
    pods, transform_s = running_pods(cfg, nodes)
    decode_cpu_s = round(transform_s, 4)  # the watch's cost, not the cache's
    settle_heap()
    # As the scheduler runs on a cluster (kube/runner.py): bound pods wait for Tessera's device plugin.
    cache = Cache.create(xp, max_gpus=cfg.gpus_per_node, capacity=cfg.nodes, handoff=HandoffRule())
    t0 = time.perf_counter()
    cache.apply([WatchEvent("Node", "ADDED", n) for n in nodes])
    nodes_s = time.perf_counter() - t0

    events = [WatchEvent("Pod", "ADDED", p) for p in pods]
    rss_before = current_rss_mib()  # the world (the watch's copies) and an empty cache
    t0, c0 = time.perf_counter(), time.process_time()
    cache.apply(events)
    cache_apply_s = time.perf_counter() - t0
    cache_apply_cpu_s = time.process_time() - c0  # the steadier figure on a shared machine
    rss_after = current_rss_mib()

    # The same placements again, on a fresh state: only the array updates.
    placements: list[Placement] = list(cache.placements.values())
    state = ClusterState(xp, max_gpus=cfg.gpus_per_node, capacity=cfg.nodes)
    for row in range(cfg.nodes):
        node = cache.state.nodes[row]
        assert node is not None
        state.add_node(node)
    t0 = time.perf_counter()
    state.apply_many(placements)  # what Cache.apply does with the placements of a burst of events
    state.commit()
    state_apply_s = time.perf_counter() - t0

    updates = [WatchEvent("Node", "MODIFIED", n) for n in nodes]
    t0 = time.perf_counter()
    cache.apply(updates)
    node_updates_s = time.perf_counter() - t0
    return {
        "config": {
            "nodes": cfg.nodes,
            "gpus_per_node": cfg.gpus_per_node,
            "pods": cfg.pods,
            "seed": cfg.seed,
            "api_fields": cfg.api_fields,
        },
        "backend": backend_label(xp),
        "pod_events": len(events),
        "accounted": len(placements),
        "errors": len(cache.errors),
        "nodes_added_s": round(nodes_s, 4),
        "cache_apply_s": round(cache_apply_s, 4),
        "cache_apply_cpu_s": round(cache_apply_cpu_s, 4),
        "watch_decode_cpu_s": decode_cpu_s,
        "cache_events_per_s": round(len(events) / cache_apply_s, 1) if cache_apply_s else 0.0,
        "state_apply_s": round(state_apply_s, 4),
        "state_events_per_s": round(len(placements) / state_apply_s, 1) if state_apply_s else 0.0,
        "node_updates": len(updates),
        "node_updates_s": round(node_updates_s, 4),
        "allocated_gpus": round(cache.state.allocated_milli() / 1000, 1),
        # The peak includes making the world (with --api-fields, the served pods and their slimmed copies at
        # once); the RSS before and after the relist is the scheduler's: the watch's pods, then the cache.
        "rss_before_apply_mib": rss_before,
        "rss_after_apply_mib": rss_after,
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }
