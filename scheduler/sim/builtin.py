"""The built-in demo cluster and workload behind a bare `tessera simulate`.

352 GPUs of two models (32 nodes x 8 H100-80GB, 24 nodes x 4 L4-24GB), a queue tree for two
organisations, and 40 minutes of arrivals (more work than the cluster holds at its peak): fractional inference, notebooks asking by memory, single-GPU
and multi-GPU training, distributed gangs, CPU-only pods, plus a few pods that cannot run (an invalid
fraction, an unknown queue, a GPU model the cluster does not have) to show how Tessera explains itself.
Deterministic: the same seed gives the same workload.
"""

from __future__ import annotations

import random
from typing import Any

from scheduler.api.keys import (
    GPU_FRACTION,
    GPU_MEMORY,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    POD_GROUP,
    QUEUE_LABEL,
    SCHEDULER_NAME,
    SIM_ARRIVAL,
    SIM_DURATION,
    WHOLE_GPU_RESOURCE,
)
from scheduler.sim.loader import Manifests

Obj = dict[str, Any]
BUILTIN_UNTIL_S = 2400.0  # arrivals span the first 40 minutes
H100 = ("NVIDIA-H100-80GB-HBM3", 81559)
L4 = ("NVIDIA-L4", 23034)


def node(name: str, model: tuple[str, int], gpus: int, cpu: int, mem_gi: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                GPU_PRODUCT_LABEL: model[0],
                GPU_MEMORY_LABEL: str(model[1]),
                "pool": name.split("-")[0],
            },
        },
        "status": {"capacity": {"cpu": str(cpu), "memory": f"{mem_gi}Gi", WHOLE_GPU_RESOURCE: str(gpus)}},
    }


def queue(
    name: str, parent: str | None, gpu_quota: float, weight: float = 1, limit: float = -1, priority: int = 100
) -> Obj:
    unlimited = {"quota": -1, "overQuotaWeight": 1, "limit": -1}
    spec: Obj = {
        "priority": priority,
        "resources": {
            "gpu": {"quota": gpu_quota, "overQuotaWeight": weight, "limit": limit},
            "cpu": unlimited,
            "memory": unlimited,
        },
    }
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": "scheduling.tessera.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def pod(
    name: str,
    queue_name: str,
    *,
    arrival_s: float,
    duration_s: float,
    cpu: str = "2",
    memory: str = "8Gi",
    annotations: dict[str, str] | None = None,
    gpus: int = 0,
    priority_class: str = "train",
    node_selector: dict[str, str] | None = None,
    namespace: str | None = None,
    grace_s: float | None = None,
) -> Obj:
    limits: Obj = {WHOLE_GPU_RESOURCE: str(gpus)} if gpus else {}
    spec: Obj = {
        "schedulerName": SCHEDULER_NAME,
        "priorityClassName": priority_class,
        "containers": [
            {"name": "main", "image": "registry.local/ml:latest",
             "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits}}
        ],
    }  # fmt: skip
    if node_selector:
        spec["nodeSelector"] = node_selector
    if grace_s is not None:
        spec["terminationGracePeriodSeconds"] = int(grace_s)
    ann = {SIM_ARRIVAL: f"{arrival_s:.0f}s", SIM_DURATION: f"{duration_s:.0f}s", **(annotations or {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace or queue_name,
            "labels": {QUEUE_LABEL: queue_name},
            "annotations": ann,
        },
        "spec": spec,
    }


def podgroup(name: str, namespace: str, queue_name: str, min_member: int) -> Obj:
    return {
        "apiVersion": "scheduling.tessera.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member, "queue": queue_name, "priorityClassName": "train"},
    }


def builtin_manifests(seed: int = 7) -> Manifests:
    rng = random.Random(seed)
    m = Manifests()
    o = m.objects
    o["Node"] += [node(f"h100-{i:02d}", H100, 8, 96, 1024) for i in range(32)]
    o["Node"] += [node(f"l4-{i:02d}", L4, 4, 48, 384) for i in range(24)]
    o["Queue"] += [
        queue("research", None, 200, weight=1),
        queue("vision", "research", 96, weight=2),
        queue("nlp", "research", 96, weight=1),
        queue("production", None, 120, weight=1, priority=200),
        queue("inference", "production", 100, limit=160, priority=200),
        queue("default", None, 0, weight=1),
    ]

    def t(span: float = BUILTIN_UNTIL_S) -> float:
        return rng.uniform(0, span)

    def dur(lo_min: float, hi_min: float) -> float:
        return rng.uniform(lo_min, hi_min) * 60

    for i in range(260):  # fractional inference servers (non-preemptible)
        ann = ({GPU_FRACTION: rng.choice(["0.25", "0.5", "0.5", "0.75"])} if i % 3 else
               {GPU_MEMORY: rng.choice(["12000", "20000"])})  # fmt: skip
        o["Pod"].append(pod(f"serve-{i:03d}", "inference", arrival_s=t(), duration_s=dur(20, 60), cpu="4", memory="16Gi",
                            annotations=ann, priority_class="inference"))  # fmt: skip
    for i in range(40):  # notebooks asking by memory, on the small GPUs
        o["Pod"].append(pod(f"notebook-{i:02d}", "nlp", arrival_s=t(), duration_s=dur(10, 40), cpu="2",
                            annotations={GPU_MEMORY: rng.choice(["6000", "10000", "16000"])}, priority_class="build-preemptible",
                            node_selector={GPU_PRODUCT_LABEL: L4[0]}))  # fmt: skip
    for i in range(140):  # single- and multi-GPU training
        gpus = rng.choice([1, 1, 1, 2, 4])
        q = "vision" if i % 2 else "nlp"
        o["Pod"].append(
            pod(
                f"train-{i:02d}",
                q,
                arrival_s=t(),
                duration_s=dur(10, 45),
                cpu=str(8 * gpus),
                memory=f"{32 * gpus}Gi",
                gpus=gpus,
            )
        )
    for g in range(12):  # distributed training gangs: 4 workers x 4 GPUs (vision) / 2 x 8 (nlp)
        q, workers, gpus = ("vision", 4, 4) if g % 2 == 0 else ("nlp", 2, 8)
        name = f"ddp-{g}"
        o["PodGroup"].append(podgroup(name, q, q, workers))
        arrival, duration = t(), dur(15, 40)
        for w in range(workers):
            o["Pod"].append(pod(f"{name}-worker-{w}", q, arrival_s=arrival, duration_s=duration, cpu="32", memory="128Gi",
                                gpus=gpus, annotations={POD_GROUP: name}))  # fmt: skip
    for i in range(24):  # CPU-only preprocessing
        o["Pod"].append(
            pod(f"etl-{i:02d}", "default", arrival_s=t(), duration_s=dur(5, 20), cpu="8", memory="32Gi")
        )
    # Pods that cannot run, each with its own explanation.
    o["Pod"].append(
        pod("bad-fraction", "vision", arrival_s=60, duration_s=600, annotations={GPU_FRACTION: "1.5"})
    )
    o["Pod"].append(
        pod(
            "lost-queue",
            "ghost",
            arrival_s=60,
            duration_s=600,
            annotations={GPU_FRACTION: "0.5"},
            namespace="vision",
        )
    )
    o["Pod"].append(pod("wants-a100", "vision", arrival_s=60, duration_s=600, gpus=1,
                        node_selector={GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}))  # fmt: skip
    return m
