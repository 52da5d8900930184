"""Parse Kubernetes objects (plain dicts, as the API or a YAML file gives them) into domain types.

The simulated cluster and the Kubernetes adapter both feed dicts through here, so both see exactly the
same validation. Nothing here raises on bad user input: a pod with a bad request becomes a `PodInfo` whose
`error` says why, and the scheduler reports it on the pod.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from scheduler.api.gpu_request import GPURequest, InvalidGPURequest, parse_gpu_request
from scheduler.api.keys import (
    DEFAULT_QUEUE,
    GPU_FRACTION,
    GPU_FRACTION_NUM_DEVICES,
    GPU_MEMORY,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    KAI_POD_GROUP,
    KAI_QUEUE_LABEL,
    POD_GROUP,
    QUEUE_LABEL,
    SCHEDULER_NAME,
    WHOLE_GPU_RESOURCE,
)
from scheduler.api.priority import resolve_priority
from scheduler.gpu_memory import memory_from_product
from scheduler.model import NodeInfo, PodInfo, PodPhase, Taint, Toleration

Obj = Mapping[str, Any]
MIB = 1024 * 1024


class InvalidObject(ValueError):
    """A Kubernetes object the scheduler cannot use at all (missing name, bad capacity...)."""


def quantity(raw: object, *, what: str) -> Decimal:
    value = _parsed_quantity(raw) if isinstance(raw, str | int) else _parse_quantity(raw)
    if isinstance(value, str):
        raise InvalidObject(f"{what}: {raw!r} {value}")
    return value


def _parse_quantity(raw: object) -> Decimal | str:
    """The quantity, or why it is not one (a string, so that the memo below can keep it too)."""
    try:
        value = parse_quantity(raw)
    except (ValueError, TypeError, InvalidOperation):
        return "is not a valid Kubernetes quantity"
    if not math.isfinite(float(value)) or value < 0:
        return "must be a finite, non-negative quantity"
    return Decimal(value)


# Pods repeat a handful of quantities ("4", "16Gi"): parsing each once saves most of a pod's parse time.
_parsed_quantity = functools.lru_cache(maxsize=4096)(_parse_quantity)


def cpu_milli(raw: object, what: str = "cpu") -> int:
    return math.ceil(quantity(raw, what=what) * 1000)


def memory_mib(raw: object, what: str = "memory") -> int:
    return math.ceil(quantity(raw, what=what) / MIB)


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise InvalidObject(f"{obj.get('kind', 'object')} without metadata.name")
    return meta


def parse_node(obj: Obj) -> NodeInfo:
    meta = _meta(obj)
    name = str(meta["name"])
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    status = obj.get("status") or {}
    capacity = status.get("allocatable") or status.get("capacity") or {}
    spec = obj.get("spec") or {}
    gpus = int(quantity(capacity.get(WHOLE_GPU_RESOURCE, 0), what=f"node {name} {WHOLE_GPU_RESOURCE}"))
    gpu_mem_raw = labels.get(GPU_MEMORY_LABEL)
    try:
        gpu_mem = int(gpu_mem_raw) if gpu_mem_raw else 0
    except ValueError:
        raise InvalidObject(f"node {name}: label {GPU_MEMORY_LABEL}={gpu_mem_raw!r} is not MiB") from None
    warning = None
    if gpus and gpu_mem <= 0:
        product = labels.get(GPU_PRODUCT_LABEL, "")
        gpu_mem = memory_from_product(product) or 0
        if gpu_mem > 0:
            warning = (
                f"node {name} has no {GPU_MEMORY_LABEL} label; assuming {gpu_mem} MiB per GPU from its product "
                f"{product!r}: label it (NVIDIA's GPU feature discovery does) for exact figures"
            )
        # Else 0: unknown until the node agent's GPUNodeReport says it (gpu_identity.py).
    taints = tuple(
        Taint(key=str(t.get("key", "")), value=str(t.get("value", "") or ""), effect=str(t.get("effect", "")))
        for t in spec.get("taints") or []
    )
    return NodeInfo(
        name=name,
        cpu_milli=cpu_milli(capacity.get("cpu", 0), f"node {name} cpu"),
        memory_mib=memory_mib(capacity.get("memory", 0), f"node {name} memory"),
        gpu_count=gpus,
        gpu_model=labels.get(GPU_PRODUCT_LABEL, "unknown") if gpus else "",
        gpu_memory_mib=gpu_mem,
        labels=labels,
        taints=taints,
        unschedulable=bool(spec.get("unschedulable", False)),
        warning=warning,
    )


def _sum_containers(spec: Obj, field: str) -> dict[str, Decimal]:
    """Effective pod requests/limits: max(sum of containers, any init container), as the kubelet does."""
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in ((c.get("resources") or {}).get(field) or {}).items():
            total[k] = total.get(k, Decimal(0)) + quantity(v, what=f"container {c.get('name')} {field}.{k}")
    for c in spec.get("initContainers") or []:
        for k, v in ((c.get("resources") or {}).get(field) or {}).items():
            total[k] = max(total.get(k, Decimal(0)), quantity(v, what=f"init container {field}.{k}"))
    return total


def _created_s(meta: Obj) -> float:
    raw = meta.get("creationTimestamp")
    if isinstance(raw, datetime):
        return raw.timestamp()
    if isinstance(raw, str) and raw:
        try:
            return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return 0.0


def _phase(obj: Obj) -> PodPhase:
    status_phase = str((obj.get("status") or {}).get("phase") or "Pending")
    node = (obj.get("spec") or {}).get("nodeName")
    if status_phase in ("Succeeded", "Failed"):
        return PodPhase(status_phase)
    if status_phase == "Running":
        return PodPhase.RUNNING
    return PodPhase.BOUND if node else PodPhase.PENDING


def pod_queue(labels: Mapping[str, str]) -> str:
    return labels.get(QUEUE_LABEL) or labels.get(KAI_QUEUE_LABEL) or DEFAULT_QUEUE


_NO_GPU = GPURequest()  # immutable: shared by every pod that asks for no GPU (or whose request is invalid)


@functools.lru_cache(maxsize=4096)
def _gpu_request(
    fraction: str | None, memory: str | None, devices: str | None, whole: Decimal | None, max_mib: int | None
) -> GPURequest:
    """parse_gpu_request of just the fields it reads; memoised, since pods repeat a few requests (a
    GPURequest is immutable, so sharing one is safe; invalid ones raise and are not cached)."""
    annotations = {
        k: v
        for k, v in ((GPU_FRACTION, fraction), (GPU_MEMORY, memory), (GPU_FRACTION_NUM_DEVICES, devices))
        if v is not None
    }
    limits = {WHOLE_GPU_RESOURCE: whole} if whole is not None else {}
    return parse_gpu_request(annotations, limits, max_gpu_memory_mib=max_mib)


def parse_pod(obj: Obj, *, max_gpu_memory_mib: int | None = None) -> PodInfo:
    """Parse a pod; an invalid GPU request or resource lands in `PodInfo.error`, never an exception.

    Raises InvalidObject only when the pod has no name (nothing could be reported against it).
    """
    meta = _meta(obj)
    spec = obj.get("spec") or {}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    namespace = str(meta.get("namespace") or "default")
    name = str(meta["name"])
    error: str | None = None
    request = _NO_GPU
    cpu = mem = 0
    try:
        requests = _sum_containers(spec, "requests")
        limits = _sum_containers(spec, "limits")
        # A container that sets only a limit gets a request equal to it (Kubernetes defaulting).
        for k, v in limits.items():
            requests.setdefault(k, v)
        cpu = math.ceil(requests.get("cpu", Decimal(0)) * 1000)
        mem = math.ceil(requests.get("memory", Decimal(0)) / MIB)
        request = _gpu_request(
            annotations.get(GPU_FRACTION),
            annotations.get(GPU_MEMORY),
            annotations.get(GPU_FRACTION_NUM_DEVICES),
            limits.get(WHOLE_GPU_RESOURCE),
            max_gpu_memory_mib,
        )
    except (InvalidGPURequest, InvalidObject) as exc:
        error = str(exc)
    priority_value = spec.get("priority")
    priority, preemptible = resolve_priority(
        spec.get("priorityClassName"), int(priority_value) if isinstance(priority_value, int) else None
    )
    selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    models = frozenset({selector[GPU_PRODUCT_LABEL]}) if GPU_PRODUCT_LABEL in selector else None
    tolerations = tuple(
        Toleration(
            key=str(t.get("key") or ""),
            operator=str(t.get("operator") or "Equal"),
            value=str(t.get("value") or ""),
            effect=str(t.get("effect") or ""),
        )
        for t in spec.get("tolerations") or []
    )
    group_name = annotations.get(POD_GROUP) or annotations.get(KAI_POD_GROUP)
    return PodInfo(
        uid=str(meta.get("uid") or f"{namespace}/{name}"),
        namespace=namespace,
        name=name,
        queue=pod_queue(labels),
        priority=priority,
        preemptible=preemptible,
        request=request,
        cpu_milli=cpu,
        memory_mib=mem,
        node_selector=selector,
        tolerations=tolerations,
        gpu_models=models,
        group=f"{namespace}/{group_name}" if group_name else None,
        created_s=_created_s(meta),
        phase=_phase(obj),
        node=spec.get("nodeName"),
        ours=spec.get("schedulerName") == SCHEDULER_NAME,
        error=error,
        annotations=annotations,
    )
