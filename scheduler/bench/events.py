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

import random
import time
from dataclasses import dataclass
from typing import Any

from scheduler.api.assignment import Admission, AssignedGPU, GPUAssignment
from scheduler.api.keys import DEFAULT_QUEUE, GPU_ASSIGNMENT
from scheduler.api.priority import resolve_priority
from scheduler.bench.runner import backend_label, peak_rss_mib, settle_heap
from scheduler.bench.workload import NODE_KINDS, PodShape, draw_shape, make_nodes, pod_object
from scheduler.cache.cache import Cache
from scheduler.cache.cluster import WatchEvent
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


def running_pods(cfg: EventsConfig, nodes: list[Obj]) -> list[Obj]:
    """Pods bound round-robin over the nodes, each with an assignment that fits (first-fit per node)."""
    rng = random.Random(cfg.seed)
    free = [[1000] * cfg.gpus_per_node for _ in nodes]
    mib = {model: m for model, m, _ in NODE_KINDS}
    pods: list[Obj] = []
    i = 0
    priority, preemptible = resolve_priority(
        pod_object("any", PodShape(1))["spec"]["priorityClassName"], None
    )
    while len(pods) < cfg.pods:
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
        obj = pod_object(f"run-{len(pods):06d}", shape)
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
        pods.append(obj)
    return pods


def run_events(cfg: EventsConfig) -> dict[str, Any]:
    xp = get_namespace(cfg.backend, problem_gpus=cfg.nodes * cfg.gpus_per_node)
    nodes = make_nodes(cfg.nodes, cfg.gpus_per_node)
    pods = running_pods(cfg, nodes)
    settle_heap()
    cache = Cache.create(xp, max_gpus=cfg.gpus_per_node, capacity=cfg.nodes)
    t0 = time.perf_counter()
    cache.apply([WatchEvent("Node", "ADDED", n) for n in nodes])
    nodes_s = time.perf_counter() - t0

    events = [WatchEvent("Pod", "ADDED", p) for p in pods]
    t0, c0 = time.perf_counter(), time.process_time()
    cache.apply(events)
    cache_apply_s = time.perf_counter() - t0
    cache_apply_cpu_s = time.process_time() - c0  # the steadier figure on a shared machine

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
        },
        "backend": backend_label(xp),
        "pod_events": len(events),
        "accounted": len(placements),
        "errors": len(cache.errors),
        "nodes_added_s": round(nodes_s, 4),
        "cache_apply_s": round(cache_apply_s, 4),
        "cache_apply_cpu_s": round(cache_apply_cpu_s, 4),
        "cache_events_per_s": round(len(events) / cache_apply_s, 1) if cache_apply_s else 0.0,
        "state_apply_s": round(state_apply_s, 4),
        "state_events_per_s": round(len(placements) / state_apply_s, 1) if state_apply_s else 0.0,
        "node_updates": len(updates),
        "node_updates_s": round(node_updates_s, 4),
        "allocated_gpus": round(cache.state.allocated_milli() / 1000, 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }
