"""The synthetic cluster and the openb-like pod mix the benchmark schedules.

Proportions follow the Alibaba openb default trace (see ../shared/traces/README.md): of 8,152 pods,
13.3% CPU-only, 37.8% fractional (50..810 milli of one GPU, most often 810, 470, 320, 650), 48.0% one
whole GPU, 0.9% multi-GPU (2, 4 or 8). Only these summary figures are used; pods are generated here.
CPU and memory requests come from a few sizes, as in the trace, so pod shapes repeat (a scheduler may
exploit that, as real clusters let it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from scheduler.api.keys import (
    GPU_FRACTION,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    POD_GROUP,
    SCHEDULER_NAME,
    WHOLE_GPU_RESOURCE,
)

Obj = dict[str, Any]

# (kind, weight): kind is "cpu", "frac" or the number of whole GPUs.
KIND_WEIGHTS: tuple[tuple[str | int, float], ...] = (
    ("cpu", 1088), ("frac", 3078), (1, 3911), (2, 16), (4, 15), (8, 44),
)  # fmt: skip
# GPU milli of fractional pods and how often each appears in openb (the long tail folded into neighbours).
FRACTION_WEIGHTS: tuple[tuple[int, float], ...] = (
    (810, 1078), (470, 750), (320, 328), (650, 253), (230, 140), (460, 128), (590, 75), (160, 74),
    (550, 72), (220, 62), (370, 47), (110, 24), (480, 19), (50, 7),
)  # fmt: skip
# CPU (cores) of a pod, per GPU for GPU pods; memory follows at 4 GiB per core.
CPU_WEIGHTS: tuple[tuple[int, float], ...] = ((2, 3), (4, 3), (8, 3), (12, 2), (16, 1))
# Two GPU node kinds (model, MiB per GPU, share of nodes): fractions convert to memory per model.
NODE_KINDS: tuple[tuple[str, int, float], ...] = (("G2-80GB", 81920, 0.75), ("T4-16GB", 16384, 0.25))
CORES_PER_GPU = 12
GIB_PER_CORE = 4


def mean_demand() -> tuple[float, float]:
    """Expected (GPUs, CPU cores) of one pod of the mix (gangs aside), from the tables above."""
    kinds = sum(w for _, w in KIND_WEIGHTS)
    frac = sum(m * w for m, w in FRACTION_WEIGHTS) / sum(w for _, w in FRACTION_WEIGHTS) / 1000
    cores = sum(c * w for c, w in CPU_WEIGHTS) / sum(w for _, w in CPU_WEIGHTS)
    gpus = sum((frac if k == "frac" else 0 if k == "cpu" else int(k)) * w for k, w in KIND_WEIGHTS) / kinds
    per_pod_cores = sum((int(k) if isinstance(k, int) else 1) * cores * w for k, w in KIND_WEIGHTS) / kinds
    return gpus, per_pod_cores


def _pick(rng: random.Random, table: tuple[tuple[Any, float], ...]) -> Any:
    return rng.choices([v for v, _ in table], weights=[w for _, w in table])[0]


def gpu_node(name: str, model: str, mib: int, gpus: int) -> Obj:
    cores = max(CORES_PER_GPU * gpus, 16)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {GPU_PRODUCT_LABEL: model, GPU_MEMORY_LABEL: str(mib)}},
        "status": {
            "capacity": {
                "cpu": str(cores),
                "memory": f"{cores * GIB_PER_CORE * 2}Gi",
                WHOLE_GPU_RESOURCE: str(gpus),
            }
        },
    }


def make_nodes(count: int, gpus_per_node: int) -> list[Obj]:
    """`count` GPU nodes, the kinds interleaved deterministically by their shares."""
    nodes = []
    acc = 0.0
    for i in range(count):
        acc += NODE_KINDS[1][2]
        model, mib, _ = NODE_KINDS[1] if acc >= 1.0 else NODE_KINDS[0]
        acc -= 1.0 if acc >= 1.0 else 0.0
        nodes.append(gpu_node(f"node-{i:05d}", model, mib, gpus_per_node))
    return nodes


@dataclass(frozen=True)
class PodShape:
    cpu_cores: int
    gpus: int = 0  # whole GPUs
    milli: int = 0  # fraction of one GPU, when 0 < milli < 1000


def draw_shape(rng: random.Random) -> PodShape:
    kind = _pick(rng, KIND_WEIGHTS)
    cores = _pick(rng, CPU_WEIGHTS)
    if kind == "cpu":
        return PodShape(cores)
    if kind == "frac":
        return PodShape(cores, milli=_pick(rng, FRACTION_WEIGHTS))
    return PodShape(cores * int(kind), gpus=int(kind))


def pod_object(name: str, shape: PodShape, *, group: str | None = None, namespace: str = "bench") -> Obj:
    limits: Obj = {WHOLE_GPU_RESOURCE: str(shape.gpus)} if shape.gpus else {}
    annotations: Obj = {}
    if shape.milli:
        annotations[GPU_FRACTION] = f"{shape.milli / 1000:g}"
    if group:
        annotations[POD_GROUP] = group
    requests = {"cpu": str(shape.cpu_cores), "memory": f"{shape.cpu_cores * GIB_PER_CORE}Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "annotations": annotations},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "priorityClassName": "train",
            "containers": [{"name": "main", "resources": {"requests": requests, "limits": limits}}],
        },
        "status": {"phase": "Pending"},
    }


def podgroup_object(name: str, min_member: int, namespace: str = "bench") -> Obj:
    return {
        "apiVersion": "scheduling.tessera.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member, "queue": "default", "priorityClassName": "train"},
    }


@dataclass
class Batch:
    pods: list[Obj]
    podgroups: list[Obj]


def make_pods(
    prefix: str, count: int, *, gang_fraction: float, rng: random.Random, gang_size: int = 0
) -> Batch:
    """`count` pods; about `gang_fraction` of them in gangs (2 x 8 GPUs, 4 x 1 GPU or 8 x 1 GPU; with
    `gang_size`, every gang is that many pods of 1 GPU)."""
    pods: list[Obj] = []
    groups: list[Obj] = []
    sizes = ((gang_size, 1),) if gang_size else ((2, 8), (4, 1), (8, 1))
    mean = sum(s for s, _ in sizes) / len(sizes)
    f = min(max(gang_fraction, 0.0), 1.0)
    # Chance that a draw starts a gang, so that gang members are `f` of the pods on average.
    p_gang = f / (mean - f * mean + f) if f < 1.0 else 1.0
    while len(pods) < count:
        if f > 0 and rng.random() < p_gang:
            size, gpus = rng.choice(sizes)
            size = min(size, count - len(pods))
            name = f"{prefix}-gang-{len(groups):05d}"
            groups.append(podgroup_object(name, size))
            for w in range(size):
                shape = PodShape(CORES_PER_GPU // 2 * gpus, gpus=gpus)
                pods.append(pod_object(f"{name}-{w}", shape, group=name))
            continue
        pods.append(pod_object(f"{prefix}-{len(pods):06d}", draw_shape(rng)))
    return Batch(pods, groups)


HOSTNAME_LABEL = "kubernetes.io/hostname"


def label_hostnames(nodes: list[Obj]) -> None:
    """Every node its `kubernetes.io/hostname` label, as kubelets register them."""
    for node in nodes:
        node["metadata"]["labels"][HOSTNAME_LABEL] = node["metadata"]["name"]


def make_deployments(prefix: str, count: int, *, replicas: int, anti_affinity: bool) -> Batch:
    """`count` plain pods (1 core, no GPU) in Deployments of `replicas`, each labelled `app: <deployment>`;
    with `anti_affinity`, each replica requires a node without another of its Deployment (a required
    podAntiAffinity term on the hostname, as HA Deployments write it)."""
    pods: list[Obj] = []
    for i in range(count):
        app = f"{prefix}-{i // replicas:05d}"
        obj = pod_object(f"{app}-{i % replicas}", PodShape(1))
        obj["metadata"]["labels"] = {"app": app}
        if anti_affinity:
            term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOSTNAME_LABEL}
            obj["spec"]["affinity"] = {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
            }
        pods.append(obj)
    return Batch(pods, [])
