"""What one pod needs, in the form the placement kernels consume."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from scheduler.api.keys import GPU_PRODUCT_LABEL, MILLI_PER_GPU
from scheduler.model.constraints import PodScope
from scheduler.model.selectors import NodeSelectorTerm
from scheduler.model.types import PodInfo, Toleration


@dataclass(frozen=True)
class PodDemand:
    """A pod's demand. Per GPU it asks `gpu_milli` and/or `gpu_mib`; each is converted into the other with
    the memory of the candidate GPU (a fraction gets that share of memory, a memory request that share of
    compute). Whole GPUs ask 1000 milli, i.e. an untouched GPU."""

    cpu_milli: int = 0
    memory_mib: int = 0
    num_gpus: int = 0
    gpu_milli: int = 0
    gpu_mib: int = 0
    models: frozenset[str] | None = None
    selector: tuple[str, ...] = ()  # "key=value" node labels required
    tolerations: tuple[Toleration, ...] = ()
    # Every other resource it requests (ephemeral-storage, hugepages, extended resources), by name.
    scalars: tuple[tuple[str, int], ...] = ()
    # Required node affinity (the OR of its terms); None: none.
    node_terms: tuple[NodeSelectorTerm, ...] | None = None
    host_ports: tuple[str, ...] = ()  # "protocol/port/hostIP" it binds
    # Who the pod is to the inter-pod rules (its namespace, labels and constraints): not part of the
    # demand's identity (the placer's caches are per row-local demand; the inter-pod rules are applied on
    # top, per pod: scheduler/cache/pod_topology.py). None: a demand built without a pod (trace replays).
    scope: PodScope | None = field(default=None, compare=False)

    @property
    def whole(self) -> bool:
        return self.gpu_milli >= MILLI_PER_GPU

    @property
    def uses_gpu(self) -> bool:
        return self.num_gpus > 0

    def describe(self) -> str:
        if not self.uses_gpu:
            return "no GPU"
        if self.whole:
            each = f"{self.num_gpus} whole GPU" + ("s" if self.num_gpus > 1 else "")
        else:
            part = f"{self.gpu_milli} milli" if self.gpu_milli else f"{self.gpu_mib} MiB"
            each = f"{part} of a GPU" + (f" on each of {self.num_gpus} GPUs" if self.num_gpus > 1 else "")
        if self.models:
            each += f" (model {'|'.join(sorted(self.models))})"
        return each


def demand_for(pod: PodInfo) -> PodDemand:
    """What `pod` asks and where it may go; worked out once per version of the pod (a PodInfo is never
    changed: a new version is a new object), kept on it (`PodInfo.demand_memo`)."""
    d = pod.demand_memo
    if d is None:
        d = _demand_for(pod)
        object.__setattr__(pod, "demand_memo", d)  # frozen: a cache of its own fields, not a change
    return cast(PodDemand, d)


def _demand_for(pod: PodInfo) -> PodDemand:
    req = pod.request
    return PodDemand(
        cpu_milli=pod.cpu_milli,
        memory_mib=pod.memory_mib,
        num_gpus=req.num_devices,
        gpu_milli=req.milli if req.kind in ("whole", "fraction") else 0,
        gpu_mib=req.memory_mib if req.kind == "memory" else 0,
        models=pod.gpu_models,
        # The GPU-model label is matched through `models` (a clearer reason when it fails).
        selector=tuple(sorted(f"{k}={v}" for k, v in pod.node_selector.items() if k != GPU_PRODUCT_LABEL)),
        tolerations=pod.tolerations,
        scalars=pod.scalars,
        node_terms=pod.constraints.required_nodes,
        host_ports=pod.constraints.host_ports,
        scope=pod_scope(pod),
    )


def size_of(pod: PodInfo) -> PodDemand:
    """`demand_for(pod)` without what places it (selector, tolerations, affinity, who it is): what it asks.
    For counting pods by size (the live workload counts every running pod once after a restart)."""
    req = pod.request
    return PodDemand(
        cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib, num_gpus=req.num_devices,
        gpu_milli=req.milli if req.kind in ("whole", "fraction") else 0,
        gpu_mib=req.memory_mib if req.kind == "memory" else 0, models=pod.gpu_models,
    )  # fmt: skip


def pod_scope(pod: PodInfo) -> PodScope:
    return PodScope(
        pod.namespace,
        tuple(sorted(pod.labels.items())),
        tuple(sorted(pod.node_selector.items())),
        pod.constraints,
    )
