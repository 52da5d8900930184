"""Parse Kubernetes objects (plain dicts, as the API or a YAML file gives them) into domain types.

Every `PodInfo` of the scheduler is made here: `parse_pod`, or `invalid_pod` for what can be read of a pod
it refused.

The simulated cluster and the Kubernetes adapter both feed dicts through here, so both see exactly the
same validation. Nothing here raises on bad user input: a pod with a bad request becomes a `PodInfo` whose
`error` says why, and the scheduler reports it on the pod.
"""

from __future__ import annotations

import functools
import marshal
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from scheduler.api.gpu_request import GPURequest, InvalidGPURequest, parse_gpu_request
from scheduler.api.keys import (
    DEFAULT_QUEUE,
    GPU_FRACTION,
    GPU_FRACTION_NUM_DEVICES,
    GPU_MEMORY,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_SLICE_RESOURCE,
    KAI_POD_GROUP,
    KAI_QUEUE_LABEL,
    POD_GROUP,
    QUEUE_LABEL,
    SCHEDULER_NAME,
    WHOLE_GPU_RESOURCE,
)
from scheduler.api.limits import (
    MAX_CPU_MILLI,
    MAX_GPU_MEMORY_MIB,
    MAX_GPUS_PER_NODE,
    MAX_MEMORY_MIB,
    MAX_PODS_PER_NODE,
    MAX_PRIORITY,
    MAX_SCALAR,
    MIN_PRIORITY,
)
from scheduler.api.priority import resolve_priority
from scheduler.api.quantity import InvalidQuantity, parse_quantity
from scheduler.model.constraints import NO_CONSTRAINTS, PodConstraints, parse_constraints
from scheduler.model.frozen import ByIdentity, is_frozen
from scheduler.model.gpu_memory import memory_from_product
from scheduler.model.requests import aggregate, container_requests, pod_requests
from scheduler.model.selectors import InvalidSelector
from scheduler.model.types import NodeInfo, PodInfo, PodOverlay, PodPhase, Taint, Toleration

Obj = Mapping[str, Any]
MIB = 1024 * 1024


class InvalidObject(ValueError):
    """A Kubernetes object the scheduler cannot use at all (missing name, bad capacity...)."""


# Upper bounds of the quantities the scheduler reads (scheduler/api/limits.py), in their own units.
_MAX_CORES = Decimal(MAX_CPU_MILLI) / 1000
_MAX_BYTES = Decimal(MAX_MEMORY_MIB) * MIB
_MAXIMUM = {"cpu": _MAX_CORES, "memory": _MAX_BYTES, WHOLE_GPU_RESOURCE: Decimal(MAX_GPUS_PER_NODE)}
_MAX_SCALAR = Decimal(MAX_SCALAR)
_MIB_LABEL = re.compile(r"[0-9]{1,12}", re.ASCII)


def quantity(raw: object, *, what: str, maximum: Decimal | None = None) -> Decimal:
    value = _quantity_or_reason(raw, maximum)
    if isinstance(value, str):
        raise InvalidObject(f"{what}: {value}")
    return value


def _quantity_or_reason(raw: object, maximum: Decimal | None) -> Decimal | str:
    # bool is an int: it must not share the memo with 1 and 0 (parse_quantity refuses it)
    if type(raw) is str or (type(raw) is int):
        return _parsed_quantity(raw, maximum)
    return _parse_quantity(raw, maximum)


def _parse_quantity(raw: object, maximum: Decimal | None) -> Decimal | str:
    """The quantity, or why it is not one (a string, so that the memo below can keep it too)."""
    try:
        return parse_quantity(raw, maximum=maximum)
    except InvalidQuantity as exc:
        return str(exc)


# Pods repeat a handful of quantities ("4", "16Gi"): parsing each once saves most of a pod's parse time.
_parsed_quantity = functools.lru_cache(maxsize=4096)(_parse_quantity)


def cpu_milli(raw: object, what: str = "cpu") -> int:
    return math.ceil(quantity(raw, what=what, maximum=_MAX_CORES) * 1000)


def memory_mib(raw: object, what: str = "memory") -> int:
    return math.ceil(quantity(raw, what=what, maximum=_MAX_BYTES) / MIB)


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    """A map field (labels, resources...); absent is empty, any other shape is refused."""
    if type(value) is dict:  # the common case first: isinstance against an ABC is slow
        return value
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise InvalidObject(f"{what} must be a map, not a {type(value).__name__}")
    return value


def _items(value: object, what: str) -> list[Mapping[str, Any]]:
    """A list of maps (containers, taints, tolerations); absent is empty."""
    if value is None:
        return []
    if type(value) is not list or not all(type(v) is dict or isinstance(v, Mapping) for v in value):
        raise InvalidObject(f"{what} must be a list of maps")
    return value


_EMPTY: Mapping[str, Any] = MappingProxyType({})


class _NoStrings(dict[str, str]):
    """A read-only map of strings: the empty one every pod without a node selector (most), labels or
    annotations shares (a new `{}` each was 24 MiB of a 150,000-pod relist), and the label maps of the pods
    whose labels the watch shares. A `PodInfo` is never written to; these refuse it."""

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a parsed pod's maps are read-only")

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type[dict[str, str]], tuple[dict[str, str]]]:
        return dict, (dict(self),)  # a copy (copy, deepcopy, pickle) is a plain map of its own: writable


NO_STRINGS: dict[str, str] = _NoStrings()


# Label maps the pod watch shares between pods (model/frozen.py), checked once: one read-only map for all.
_SHARED_STRINGS: ByIdentity[dict[str, str]] = ByIdentity()


def _strings(value: object, what: str) -> dict[str, str]:
    if not value and (value is None or type(value) is dict):
        return NO_STRINGS  # most pods have no node selector, many no labels
    found = _SHARED_STRINGS.get(value)
    if found is not None:
        return found
    out = {str(k): str(v) for k, v in _mapping(value, what).items()}
    return _SHARED_STRINGS.put(value, _NoStrings(out)) if is_frozen(value) else out


def _meta(obj: Obj) -> Obj:
    if type(obj) is not dict and not isinstance(obj, Mapping):  # (the ABC check is slow: dicts first)
        raise InvalidObject(f"an object must be a map, not a {type(obj).__name__}")
    meta = obj.get("metadata")
    if (type(meta) is not dict and not isinstance(meta, Mapping)) or not meta.get("name"):
        raise InvalidObject(f"{obj.get('kind', 'object')} without metadata.name")
    return meta


def parse_node(obj: Obj) -> NodeInfo:
    """Parse a node; InvalidObject (one line, naming the node and the field) when it cannot be used."""
    meta = _meta(obj)
    name = str(meta["name"])
    try:
        return _parse_node(name, meta, obj)
    except InvalidObject as exc:
        raise InvalidObject(f"node {name} is unusable: {exc}") from None
    except (TypeError, AttributeError, ValueError, ArithmeticError) as exc:
        raise InvalidObject(f"node {name} is unusable: malformed object ({type(exc).__name__})") from None


def _parse_node(name: str, meta: Obj, obj: Obj) -> NodeInfo:
    labels = _strings(meta.get("labels"), "metadata.labels")
    status = _mapping(obj.get("status"), "status")
    capacity = _mapping(status.get("allocatable") or status.get("capacity"), "status.allocatable")
    spec = _mapping(obj.get("spec"), "spec")
    gpu_raw = capacity.get(WHOLE_GPU_RESOURCE, 0)
    gpus_exact = quantity(gpu_raw, what=f"{WHOLE_GPU_RESOURCE}", maximum=Decimal(MAX_GPUS_PER_NODE))
    if gpus_exact != gpus_exact.to_integral_value():
        raise InvalidObject(f"{WHOLE_GPU_RESOURCE}={gpu_raw!r} is not a whole number of GPUs")
    gpus = int(gpus_exact)
    gpu_mem_raw = labels.get(GPU_MEMORY_LABEL)
    gpu_mem = 0
    if gpu_mem_raw:
        if not _MIB_LABEL.fullmatch(gpu_mem_raw):
            raise InvalidObject(f"label {GPU_MEMORY_LABEL}={gpu_mem_raw[:40]!r} is not MiB (ASCII digits)")
        gpu_mem = int(gpu_mem_raw)
        if gpu_mem > MAX_GPU_MEMORY_MIB:
            raise InvalidObject(
                f"label {GPU_MEMORY_LABEL}={gpu_mem_raw} MiB is more than any GPU has "
                f"(at most {MAX_GPU_MEMORY_MIB} MiB)"
            )
    warning = None
    if gpus and gpu_mem <= 0:
        product = labels.get(GPU_PRODUCT_LABEL, "")
        gpu_mem = memory_from_product(product) or 0
        if gpu_mem > MAX_GPU_MEMORY_MIB:
            raise InvalidObject(
                f"label {GPU_PRODUCT_LABEL}={product[:63]!r} names more memory than any GPU has "
                f"(at most {MAX_GPU_MEMORY_MIB} MiB)"
            )
        if gpu_mem > 0:
            warning = (
                f"node {name} has no {GPU_MEMORY_LABEL} label; assuming {gpu_mem} MiB per GPU from its product "
                f"{product[:63]!r}: label it (NVIDIA's GPU feature discovery does) for exact figures"
            )
        # Else 0: unknown until the node agent's GPUNodeReport says it (gpu_identity.py).
    taints = tuple(
        Taint(key=str(t.get("key", "")), value=str(t.get("value", "") or ""), effect=str(t.get("effect", "")))
        for t in _items(spec.get("taints"), "spec.taints")
    )
    allocatable = _resource_list(capacity, "allocatable")
    pods_raw = allocatable.get("pods")
    if pods_raw is not None and (pods_raw != pods_raw.to_integral_value() or pods_raw > MAX_PODS_PER_NODE):
        raise InvalidObject(
            f"allocatable pods={capacity.get('pods')!r} is not a whole number up to {MAX_PODS_PER_NODE}"
        )
    return NodeInfo(
        name=name,
        cpu_milli=cpu_milli(capacity.get("cpu", 0), "cpu"),
        # Rounded down: a node is never taken to have memory it lacks (pods' requests are rounded up).
        memory_mib=int(quantity(capacity.get("memory", 0), what="memory", maximum=_MAX_BYTES) // MIB),
        pods=None if pods_raw is None else int(pods_raw),
        scalars=tuple(sorted((k, int(v)) for k, v in allocatable.items() if k not in _OWN_FIELDS)),
        gpu_count=gpus,
        gpu_model=labels.get(GPU_PRODUCT_LABEL, "unknown") if gpus else "",
        gpu_memory_mib=gpu_mem,
        labels=labels,
        taints=taints,
        unschedulable=bool(spec.get("unschedulable", False)),
        warning=warning,
        gpu_plugin=GPU_SLICE_RESOURCE in capacity,
    )


# The GPU resources are Tessera's own arrays (whole GPUs, and the slice the webhook adds for fractions):
# never a generic column.
GPU_RESOURCES = frozenset({WHOLE_GPU_RESOURCE, GPU_SLICE_RESOURCE})
# Resources with a field of their own; every other one a pod asks for is a column of `scalars`.
_OWN_FIELDS = frozenset({"cpu", "memory", "pods"}) | GPU_RESOURCES


def _maximum(name: str) -> Decimal:
    return _MAXIMUM.get(name, _MAX_SCALAR)


def _resource_list(values: object, what: str) -> dict[str, Decimal]:
    """A resource list (requests, limits, overhead), each quantity checked against its bound."""
    out: dict[str, Decimal] = {}
    if not values:
        return out
    for k, raw in _mapping(values, what).items():
        name = str(k)
        maximum = _maximum(name)
        amount = _parsed_quantity(raw, maximum) if type(raw) is str else _quantity_or_reason(raw, maximum)
        if type(amount) is str:
            raise InvalidObject(f"{what}.{name}: {amount}")
        assert isinstance(amount, Decimal)
        out[name] = amount
    return out


def pod_resources(spec: Obj) -> tuple[dict[str, Decimal], dict[str, Decimal]]:
    """The pod's effective (requests, limits) of every resource, as the kubelet computes them
    (scheduler/model/requests.py: sidecars add up, init containers take the max, pod-level requests,
    overhead; a container's limit stands in for its missing request). Each value and each total is
    bounded (scheduler/api/limits.py); InvalidObject with a one-line reason otherwise. (The webhook
    reads the whole-GPU limit from it.)"""
    containers = [
        (c, kind == "initContainers")
        for kind in ("containers", "initContainers")
        for c in _items(spec.get(kind), f"spec.{kind}")
    ]

    def resources_of(c: Obj) -> Obj:
        return _mapping(c.get("resources"), "resources") if c.get("resources") else _EMPTY

    def requests_of(c: Obj) -> dict[str, Decimal]:
        r = resources_of(c)
        return container_requests(r, _resource_list, f"container {c.get('name')}") if r else {}

    def limits_of(c: Obj) -> dict[str, Decimal]:
        r = resources_of(c)
        return _resource_list(r.get("limits"), f"container {c.get('name')} limits") if r else {}

    requests = pod_requests(spec, containers, requests_of, _resource_list, _mapping)
    limits = aggregate(containers, limits_of)
    for field, total in (("requests", requests), ("limits", limits)):
        for k, v in total.items():
            if v > _maximum(k):
                raise InvalidObject(
                    f"the pod's total {field}.{k} ({v}) is more than accepted ({_maximum(k)})"
                )
    return requests, limits


# Pods repeat a few resource declarations (a Deployment's replicas, a Job's pods, a relist of them all):
# their effective figures are computed once per distinct declaration. The key is the text of exactly what
# `pod_resources` reads, marshalled (it tells "1" from 1 and True, as the parser does, and is twice as fast
# as `repr`; version 0: no back-references, so equal declarations give equal bytes); one that is refused
# is never kept (its message names the pod's container).
Resources = tuple[Mapping[str, Decimal], Mapping[str, Decimal]]
# What the parser takes from a pod's resources: CPU millicores, memory MiB, the other requests (`scalars`),
# the whole-GPU limit.
Sizes = tuple[int, int, tuple[tuple[str, int], ...], Decimal | None]
_RESOURCES_MEMO: dict[bytes, tuple[Resources, Sizes]] = {}
_RESOURCES_MEMO_MAX = 4096


def _resources_key(spec: Obj) -> bytes | None:
    """What `pod_resources` reads of `spec`, as bytes; None when its containers are not a list of maps, or
    hold what `marshal` does not write (not plain dicts, lists, strings and numbers: no memo then)."""
    containers = spec.get("containers")
    init = spec.get("initContainers")
    if type(containers) is not list or (init is not None and type(init) is not list):
        return None
    try:
        return marshal.dumps((
            [(c.get("resources"), c.get("restartPolicy")) for c in containers],
            [(c.get("resources"), c.get("restartPolicy")) for c in init or ()],
            init is None, spec.get("resources"), spec.get("overhead"),
        ), 0)  # fmt: skip
    except (TypeError, AttributeError, ValueError):  # a container that is not a map: pod_resources says why
        return None


# The same, found by the identity of a containers list the pod watch shares (model/frozen.py): for the pods
# with nothing else that `pod_resources` reads (no init containers, pod-level resources or overhead).
_DECLARED_BY_CONTAINERS: ByIdentity[tuple[Resources, Sizes]] = ByIdentity()
_OTHER_RESOURCE_FIELDS = ("initContainers", "resources", "overhead")


def _declared(spec: Obj) -> tuple[Resources, Sizes]:
    """`pod_resources` and the sizes read from it, shared between pods that declare the same resources."""
    containers = spec.get("containers")
    alone = True
    for f in _OTHER_RESOURCE_FIELDS:
        if f in spec:
            alone = False
            break
    if alone:
        found = _DECLARED_BY_CONTAINERS.get(containers)
        if found is not None:
            return found
        return _DECLARED_BY_CONTAINERS.put(containers, _declared_by_key(spec))
    return _declared_by_key(spec)


def _declared_by_key(spec: Obj) -> tuple[Resources, Sizes]:
    key = _resources_key(spec)
    found = _RESOURCES_MEMO.get(key) if key is not None else None
    if found is None:
        requests, limits = pod_resources(spec)
        sizes = (
            math.ceil(requests.get("cpu", Decimal(0)) * 1000), math.ceil(requests.get("memory", Decimal(0)) / MIB),
            scalar_requests(requests), limits.get(WHOLE_GPU_RESOURCE),
        )  # fmt: skip
        found = ((MappingProxyType(requests), MappingProxyType(limits)), sizes)
        if key is not None:
            if len(_RESOURCES_MEMO) >= _RESOURCES_MEMO_MAX:
                _RESOURCES_MEMO.clear()  # a cluster of that many distinct declarations: start again
            _RESOURCES_MEMO[key] = found
    return found


def pod_resources_shared(spec: Obj) -> Resources:
    """`pod_resources`, shared between pods that declare the same resources: read-only maps."""
    return _declared(spec)[0]


def scalar_requests(requests: Mapping[str, Decimal]) -> tuple[tuple[str, int], ...]:
    """The requests without a field of their own (ephemeral-storage, hugepages, extended resources), as
    integers (a quantity's Value(), rounded up, as kube-scheduler counts them), by name; zeros left out."""
    return tuple(sorted((k, math.ceil(v)) for k, v in requests.items() if k not in _OWN_FIELDS and v > 0))


def _created_s(meta: Obj) -> float:
    # An unreadable creation time (the API server sets it) sorts the pod as the oldest.
    created = timestamp_s(meta.get("creationTimestamp"))
    return 0.0 if created is None else created


def timestamp_s(raw: object) -> float | None:
    """An RFC 3339 time from an object (a string, or a datetime from the client) as Unix time; None when
    absent or unreadable."""
    if raw is None:  # (no such field: pods made by hand, a pod the kubelet has not started)
        return None
    if type(raw) is str:
        found = _TIMES.get(raw, _UNSEEN)
        if found is not _UNSEEN:
            return found  # type: ignore[return-value]
        if len(_TIMES) >= 8192:
            _TIMES.clear()
        _TIMES[raw] = found = _timestamp_s(raw)
        return found
    return _timestamp_s(raw)


# Times repeat (the pods a controller made in one second, their start times): each text read once.
_TIMES: dict[str, float | None] = {}
_UNSEEN = object()


def _timestamp_s(raw: object) -> float | None:
    try:
        if isinstance(raw, datetime):
            return raw.timestamp()
        if isinstance(raw, str) and raw:
            return datetime.fromisoformat(raw).timestamp()  # (3.11 reads the API server's "Z" itself)
    except (ValueError, OverflowError, OSError):
        pass
    return None


def started_s(obj: Obj) -> float | None:
    """When the pod started (status.startTime, set by the kubelet once it accepted the pod); None before.
    Minimum runtimes are measured from it (docs/min-runtime.md)."""
    status = obj.get("status")
    return (
        timestamp_s(status.get("startTime")) if type(status) is dict or isinstance(status, Mapping) else None
    )


def _phase(status: Mapping[str, Any], node: str | None) -> PodPhase:
    status_phase = str(status.get("phase") or "Pending")
    if status_phase in ("Succeeded", "Failed"):
        return PodPhase(status_phase)
    if status_phase == "Running":
        return PodPhase.RUNNING
    return PodPhase.BOUND if node else PodPhase.PENDING


def pod_queue(labels: Mapping[str, str]) -> str:
    return labels.get(QUEUE_LABEL) or labels.get(KAI_QUEUE_LABEL) or DEFAULT_QUEUE


def pod_group_name(annotations: Mapping[str, Any]) -> str | None:
    """The PodGroup a pod names by annotation, Tessera's before KAI's; None: none."""
    return annotations.get(POD_GROUP) or annotations.get(KAI_POD_GROUP) or None


def pod_group(namespace: str, annotations: Mapping[str, str]) -> str | None:
    """`pod_group_name` as the job key (namespace/name)."""
    name = pod_group_name(annotations)
    return f"{namespace}/{name}" if name else None


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


def _grace_s(spec: Obj) -> float:
    """terminationGracePeriodSeconds (Kubernetes' default 30 when unset or unreadable)."""
    raw = spec.get("terminationGracePeriodSeconds")
    return float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) and raw >= 0 else 30.0


# Tolerations repeat across pods (every pod has the API server's not-ready and unreachable ones): one
# shared, immutable `Toleration` per distinct one, instead of two new objects a pod.
_TOLERATIONS: dict[tuple[str, str, str, str], Toleration] = {}


_SHARED_TOLERATIONS: ByIdentity[tuple[Toleration, ...]] = ByIdentity()


def _tolerations(raw: object) -> tuple[Toleration, ...]:
    found = _SHARED_TOLERATIONS.get(raw)  # a list the pod watch shares (model/frozen.py): read once
    if found is not None:
        return found
    return _SHARED_TOLERATIONS.put(raw, _read_tolerations(raw))


def _read_tolerations(raw: object) -> tuple[Toleration, ...]:
    out = []
    for t in _items(raw, "spec.tolerations"):
        key = (str(t.get("key") or ""), str(t.get("operator") or "Equal"), str(t.get("value") or ""),
               str(t.get("effect") or ""))  # fmt: skip
        found = _TOLERATIONS.get(key)
        if found is None:
            if len(_TOLERATIONS) >= 4096:
                _TOLERATIONS.clear()
            found = _TOLERATIONS[key] = Toleration(*key)
        out.append(found)
    return tuple(out)


def parse_pod(
    obj: Obj,
    *,
    scheduler_name: str = SCHEDULER_NAME,
    overlay: PodOverlay | None = None,
    max_gpu_memory_mib: int | None = None,
) -> PodInfo:
    """Parse a pod; an invalid GPU request, resource or priority lands in `PodInfo.error`. `scheduler_name`:
    the name pods of this scheduler give (`PodInfo.ours`); `overlay`: what the adapter knows of the pod
    beyond the object (its group, the queue and priority class that group gives it, a filled-in priority).

    Raises InvalidObject (one line) only when the pod has no name, or when its shape is not a pod's
    (labels that are not a map, containers that are not a list...: the API server never sends those).
    """
    meta = _meta(obj)
    namespace = str(meta.get("namespace") or "default")
    name = str(meta["name"])
    try:
        return _parse_pod(obj, meta, namespace, name, max_gpu_memory_mib, scheduler_name, overlay)
    except InvalidObject as exc:
        raise InvalidObject(f"pod {namespace}/{name}: {exc}") from None
    except (TypeError, AttributeError, ValueError, ArithmeticError) as exc:
        raise InvalidObject(f"pod {namespace}/{name}: malformed object ({type(exc).__name__})") from None


def _parse_pod(
    obj: Obj,
    meta: Obj,
    namespace: str,
    name: str,
    max_gpu_memory_mib: int | None,
    scheduler_name: str,
    overlay: PodOverlay | None,
) -> PodInfo:
    spec = _mapping(obj.get("spec"), "spec")
    annotations = _strings(meta.get("annotations"), "metadata.annotations")
    labels = _strings(meta.get("labels"), "metadata.labels")
    read = _spec_reading(spec)
    error = read.declared_error
    request = _NO_GPU
    cpu = mem = 0
    scalars: tuple[tuple[str, int], ...] = ()
    if read.sizes is not None:
        cpu, mem, scalars, whole = read.sizes
        try:
            request = _gpu_request(
                annotations.get(GPU_FRACTION),
                annotations.get(GPU_MEMORY),
                annotations.get(GPU_FRACTION_NUM_DEVICES),
                whole,
                max_gpu_memory_mib,
            )
        except (InvalidGPURequest, InvalidObject) as exc:
            error = str(exc)
    priority_value, priority_class = read.priority, read.priority_class
    if overlay is not None and overlay.priority_class is not None:
        priority_class, priority_value = overlay.priority_class, overlay.priority
    elif overlay is not None and overlay.priority is not None and priority_value is None:
        priority_value = overlay.priority  # the PriorityClass's value the API server left out
    if isinstance(priority_value, int) and not MIN_PRIORITY <= priority_value <= MAX_PRIORITY:
        error = error or f"spec.priority={priority_value} is not a 32-bit integer"
        priority_value = None
    priority, preemptible = resolve_priority(
        priority_class,
        priority_value if isinstance(priority_value, int) and not isinstance(priority_value, bool) else None,
    )
    selector = read.selector
    constraints = NO_CONSTRAINTS
    if read.has_constraints:
        try:
            constraints = parse_constraints(spec, namespace, name, labels)
        except InvalidSelector as exc:
            error = error or str(exc)
    models = gpu_models(selector, constraints) if selector or constraints is not NO_CONSTRAINTS else None
    status = _mapping(obj.get("status"), "status")
    node = _text(spec.get("nodeName"))
    # Positional, in the order of `_POD_FIELDS` (checked below): 27 keywords cost a relist 0.13 s matching them.
    return PodInfo(
        str(meta.get("uid") or f"{namespace}/{name}"),  # uid
        namespace,
        name,
        overlay.queue if overlay is not None and overlay.queue else pod_queue(labels),  # queue
        priority,
        preemptible,
        request,
        cpu,  # cpu_milli
        mem,  # memory_mib
        scalars,
        selector,  # node_selector
        read.tolerations,
        constraints,
        read.gates,
        labels,
        models,  # gpu_models
        f"{namespace}/{overlay.group}"
        if overlay is not None and overlay.group
        else pod_group(namespace, annotations),
        _created_s(meta),
        timestamp_s(status.get("startTime")),  # started_s
        _phase(status, node),
        node,
        read.scheduler_name == scheduler_name,  # ours
        error,
        annotations,
        bool(meta.get("deletionTimestamp")),  # terminating
        read.grace_s,
        has_controller(meta),  # controlled
    )


_POD_FIELDS = (
    "uid", "namespace", "name", "queue", "priority", "preemptible", "request", "cpu_milli", "memory_mib",
    "scalars", "node_selector", "tolerations", "constraints", "gates", "labels", "gpu_models", "group",
    "created_s", "started_s", "phase", "node", "ours", "error", "annotations", "terminating", "grace_s",
    "controlled",
)  # fmt: skip
if tuple(f.name for f in fields(PodInfo) if f.init) != _POD_FIELDS:  # (a field added, removed or moved)
    raise ImportError("parse_pod builds PodInfo by position: its fields are not those of _POD_FIELDS")


@dataclass(frozen=True, slots=True)
class _SpecReading:
    """What a pod's spec says but for the node it is bound to: the same for every pod of one template."""

    sizes: Sizes | None  # cpu, memory, other resources and whole GPUs declared; None: `declared_error`
    declared_error: str | None
    priority: object  # spec.priority, as it came
    priority_class: str | None
    selector: dict[str, str]
    has_constraints: bool  # whether `parse_constraints` has anything to read (it needs the pod's labels)
    tolerations: tuple[Toleration, ...]
    gates: tuple[str, ...]
    grace_s: float
    scheduler_name: object
    # The spec's entries but nodeName, as read, when every one is immutable or promised frozen (the pod
    # watch's: model/frozen.py): a spec holding the same ones reads the same (`_spec_reading`).
    template: dict[str, Any] | None = None


# Readings of specs whose parts the pod watch shares, found by the identity of their containers list: the
# pods of one controller hold the same parts in specs of their own (kube/informer.py `_pod_spec`).
_SPEC_READINGS: ByIdentity[_SpecReading] = ByIdentity()
_NODE_NAME = "nodeName"
_IMMUTABLE = (str, int, float, bool, type(None))


def _spec_reading(spec: Obj) -> _SpecReading:
    containers = spec.get("containers")
    found = _SPEC_READINGS.get(containers)
    if found is not None:
        kept = found.template
        assert kept is not None
        # The same entries (each compared by identity first: the shared parts are the same objects).
        if len(spec) - (_NODE_NAME in spec) == len(kept) and kept.items() <= spec.items():
            return found
    read = _read_spec(spec)
    if is_frozen(containers):
        kept = {k: v for k, v in spec.items() if k != _NODE_NAME}
        if all(type(v) in _IMMUTABLE or is_frozen(v) for v in kept.values()):
            _SPEC_READINGS.put(containers, replace(read, template=kept))
    return read


def _read_spec(spec: Obj) -> _SpecReading:
    sizes: Sizes | None = None
    declared_error = None
    try:
        sizes = _declared(spec)[1]
    except (InvalidGPURequest, InvalidObject) as exc:
        declared_error = str(exc)
    raw_tolerations = spec.get("tolerations")
    raw_gates = spec.get("schedulingGates")
    return _SpecReading(
        sizes=sizes,
        declared_error=declared_error,
        priority=spec.get("priority"),
        priority_class=_text(spec.get("priorityClassName")),
        selector=_strings(spec.get("nodeSelector"), "spec.nodeSelector"),
        has_constraints=_has_constraints(spec),
        tolerations=_tolerations(raw_tolerations) if raw_tolerations else (),
        gates=(
            tuple(str(g.get("name") or "") for g in _items(raw_gates, "spec.schedulingGates"))
            if raw_gates is not None
            else ()
        ),
        grace_s=_grace_s(spec),
        scheduler_name=spec.get("schedulerName"),
    )


_CONSTRAINT_FIELDS = ("affinity", "topologySpreadConstraints", "hostNetwork")


def _has_constraints(spec: Obj) -> bool:
    """Whether the spec has any field `parse_constraints` reads (most pods have none: skip the walk)."""
    # (plain loops: generators were 5% of a relist's time, asked for every pod)
    for f in _CONSTRAINT_FIELDS:
        if spec.get(f):
            return True
    # Almost every pod has volumes (the service account token's projected one at least), but only claims
    # (a PVC, or an ephemeral volume's) constrain where it goes: the others skip the walk, which doubled
    # a real pod's parse. Volumes that are not a list of maps are left to the walk to refuse.
    volumes = spec.get("volumes")
    if volumes:
        if type(volumes) is not list:
            return True
        for v in volumes:
            if type(v) is not dict or "persistentVolumeClaim" in v or "ephemeral" in v:
                return True
    for kind in ("containers", "initContainers"):
        for c in spec.get(kind) or ():
            if (type(c) is dict or isinstance(c, Mapping)) and c.get("ports"):
                return True
    return False


def gpu_models(selector: Mapping[str, str], constraints: PodConstraints) -> frozenset[str] | None:
    """The GPU models the pod may run on, from its node selector and its required node affinity (when
    every term names the models with `In`); None: any. The filter checks the full affinity anyway; this
    only names the models (for the reason, and for placements that keep scarce models free)."""
    models = frozenset({selector[GPU_PRODUCT_LABEL]}) if GPU_PRODUCT_LABEL in selector else None
    terms = constraints.required_nodes
    if not terms:
        return models
    named: set[str] = set()
    for term in terms:
        ins = [r for r in term.expressions if r.key == GPU_PRODUCT_LABEL and r.operator == "In"]
        if not term.valid or not ins:
            return models
        allowed = set(ins[0].values)
        for r in ins[1:]:
            allowed &= set(r.values)
        named |= allowed
    return frozenset(named) if models is None else models & frozenset(named)


def invalid_pod(
    obj: Any, reason: str, *, scheduler_name: str = SCHEDULER_NAME, overlay: PodOverlay | None = None
) -> PodInfo | None:
    """What can be read of a pod `parse_pod` refused, with `reason` as its error: enough to report it on
    the pod (pending, `InvalidRequest`), to account a bound one where it runs, and to keep it in its gang
    (a gang with an unreadable member is not started without it). None without a name."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
        return None
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    status = obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else None
    namespace = namespace or "default"
    node = spec.get("nodeName") if isinstance(spec.get("nodeName"), str) and spec.get("nodeName") else None
    raw_phase = status.get("phase")
    phase = {"Running": PodPhase.RUNNING, "Succeeded": PodPhase.SUCCEEDED, "Failed": PodPhase.FAILED}.get(
        raw_phase if isinstance(raw_phase, str) else "", PodPhase.BOUND if node else PodPhase.PENDING
    )
    annotations = meta.get("annotations")
    kept = (
        {k: v for k, v in annotations.items() if isinstance(k, str) and isinstance(v, str)}
        if isinstance(annotations, Mapping)
        else {}
    )
    uid = meta.get("uid") if isinstance(meta.get("uid"), str) and meta.get("uid") else None
    request, cpu, memory = _readable_request(spec, kept)
    return PodInfo(
        uid=uid or f"{namespace}/{meta['name']}",
        namespace=namespace,
        name=meta["name"],
        queue=DEFAULT_QUEUE,
        priority=0,
        preemptible=True,
        request=request,
        cpu_milli=cpu,
        memory_mib=memory,
        phase=phase,
        node=node,
        ours=spec.get("schedulerName") == scheduler_name,
        error=reason,
        annotations=kept,
        group=f"{namespace}/{overlay.group}"
        if overlay is not None and overlay.group
        else pod_group(namespace, kept),
        terminating=bool(meta.get("deletionTimestamp")),
    )


def _readable_request(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> tuple[GPURequest, int, int]:
    """What a pod refused for another reason (its labels, say) asks, where that part can be read: a running
    one found so by a restarted scheduler is accounted with its CPU, memory and GPUs, not as empty."""
    try:
        requests, limits = pod_resources(dict(spec))
    except Exception:  # unreadable too: nothing is known of what it asks
        return _NO_GPU, 0, 0
    cpu = math.ceil(requests.get("cpu", Decimal(0)) * 1000)
    memory = math.ceil(requests.get("memory", Decimal(0)) / MIB)
    whole = limits.get(WHOLE_GPU_RESOURCE)
    try:
        request = parse_gpu_request(annotations, {WHOLE_GPU_RESOURCE: whole} if whole is not None else {})
    except Exception:  # an invalid GPU request: its assignment, if any, says what it holds
        request = _NO_GPU
    return request, cpu, memory


def has_controller(meta: Mapping[str, Any]) -> bool:
    """Whether a controller owns the pod (an ownerReference with `controller: true`): it recreates the pod
    when it is evicted. A bare pod evicted is gone."""
    refs = meta.get("ownerReferences")
    if not refs or not isinstance(refs, list):
        return False
    for r in refs:  # noqa: SIM110 (a loop: a generator's set-up was 2% of a relist, a pod having one or two)
        if isinstance(r, dict) and r.get("controller") is True:
            return True
    return False


def _text(value: object) -> str | None:
    """An optional string field (nodeName, priorityClassName); empty is absent."""
    return str(value) if value not in (None, "") else None
