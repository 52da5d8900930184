"""AdmissionReview handling for pods and PodGroups (pure: review JSON in, review JSON out; never raises).

CREATE of a pod of the Tessera scheduler: its resources and GPU request must parse with the scheduler's
own parser and bounds (`scheduler/model/parse.py`, `scheduler/api/limits.py`), its queue must exist, be a
leaf and be open to the pod's namespace (`Queue.spec.namespaces`, docs/tenancy.md), and it must not preset
`spec.nodeName` when it asks for a GPU; a fractional request gets the `tessera.dev/gpu-slice: <num
devices>` limit on its first container, so the kubelet calls Tessera's device plugin for it. CREATE of any
other pod: it may not ask for `tessera.dev/gpu-slice`. UPDATE: the GPU request annotations are frozen, and
so are the queue and the pod group of a bound pod; a new queue must exist and be open to the namespace.
Any pod, any operation: only the scheduler writes `tessera.dev/gpu-assignment`, only the device plugin
`tessera.dev/gpu-allocated` (`guards.py` says why).

PodGroups: the queue a PodGroup names must exist, be a leaf and be open to its namespace; while the group
has running pods (its `status.running`, which only the scheduler writes), its queue, priorityClassName and
preemptibility cannot change: what a running gang is charged to and whether it may be reclaimed are fixed
when it starts (the scheduler keeps the admitted values whatever the object says, for clusters without
this webhook).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from scheduler.api.gpu_request import GPURequest, InvalidGPURequest, parse_gpu_request
from scheduler.api.keys import (
    DEFAULT_QUEUE,
    GPU_SLICE_RESOURCE,
    KAI_QUEUE_LABEL,
    QUEUE_LABEL,
    SCHEDULER_NAME,
    WHOLE_GPU_RESOURCE,
)
from scheduler.model.parse import InvalidObject, parse_pod, pod_resources
from scheduler.webhook import guards
from scheduler.webhook.review import AdmissionRequest, AdmissionReview, response

log = logging.getLogger(__name__)

QueueKind = Literal["leaf", "parent"]
# Queue name -> "leaf" / "parent", or None when no such queue exists.
QueueLookup = Callable[[str], QueueKind | None]
# (queue, namespace) -> why the namespace may not use the queue, None when it may (docs/tenancy.md).
NamespaceCheck = Callable[[str, str], str | None]
# What a running PodGroup may not change (it is charged and preempted as it started).
FROZEN_WHILE_RUNNING = ("queue", "priorityClassName", "preemptibility")


@dataclass(frozen=True)
class AdmissionConfig:
    scheduler_name: str = SCHEDULER_NAME
    # Who may write the assignment annotation: the scheduler's service account.
    privileged_users: frozenset[str] = field(
        default_factory=lambda: frozenset({"system:serviceaccount:tessera-system:tessera-scheduler"})
    )
    # Who may write tessera.dev/gpu-allocated: the device plugin's service account.
    allocation_writers: frozenset[str] = field(
        default_factory=lambda: frozenset({"system:serviceaccount:tessera-system:tessera-device-plugin"})
    )
    queue_lookup: QueueLookup | None = None  # None: queues are not checked here (the scheduler still does)
    namespace_check: NamespaceCheck | None = None  # None: not checked here (the scheduler still does)
    max_gpu_memory_mib: int | None = None


def admit(review: Any, config: AdmissionConfig) -> dict[str, Any]:
    """Answer one AdmissionReview. Whatever it holds, the answer is an AdmissionReview."""
    try:
        return _admit(review, config)
    except Exception:  # the last line of defence: the API server gets an answer, the log the trace
        log.exception("admission review failed")
        return response(
            _uid(review),
            allowed=False,
            code=500,
            message="Tessera's webhook failed on this request (a bug: see the scheduler's log)",
        )


def _uid(review: Any) -> str:
    request = review.get("request") if isinstance(review, Mapping) else None
    uid = request.get("uid") if isinstance(request, Mapping) else None
    return uid if isinstance(uid, str) else ""


def _admit(review: Any, config: AdmissionConfig) -> dict[str, Any]:
    try:
        request = AdmissionReview.model_validate(review).request
    except ValidationError as exc:
        first = _first_error(exc)
        return response(_uid(review), allowed=False, code=400, message=f"malformed AdmissionReview: {first}")
    if request.sub_resource or request.operation not in ("CREATE", "UPDATE"):
        return response(request.uid, allowed=True)
    kind = (request.kind.kind, request.resource.resource)
    if kind not in (("Pod", "pods"), ("PodGroup", "podgroups")):
        return response(request.uid, allowed=True)
    try:
        if kind == ("PodGroup", "podgroups"):
            return _admit_podgroup(request, config)
        return _admit_pod(request, config)
    except (AttributeError, TypeError, ValueError, KeyError) as exc:  # a pod shaped wrongly
        return response(
            request.uid, allowed=False, code=400, message=f"malformed pod: {type(exc).__name__}: {exc}"
        )


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid"
    where = ".".join(str(p) for p in errors[0]["loc"])
    return f"{where}: {errors[0]['msg']}" if where else str(errors[0]["msg"])


def _admit_pod(request: AdmissionRequest, config: AdmissionConfig) -> dict[str, Any]:
    pod = request.object or {}
    old = request.old_object or {}
    problem = guards.writer_problem(
        request.user_info.username,
        pod,
        old,
        assignment_writers=config.privileged_users,
        allocation_writers=config.allocation_writers,
    )
    if problem:
        return response(request.uid, allowed=False, message=problem)
    ours = guards.field_map(pod, "spec").get("schedulerName") == config.scheduler_name
    if request.operation == "UPDATE":
        problem = guards.frozen_problem(pod, old)
        if problem is None and ours and guards.labels_of(pod) != guards.labels_of(old):
            problem = _check_queue(pod, config, request.namespace)
        return response(request.uid, allowed=problem is None, message=problem or "")
    if not ours:
        problem = guards.placement_problem(pod, config.scheduler_name, gpu_request=False)
        return response(request.uid, allowed=problem is None, message=problem or "")
    return _admit_new_pod(request, pod, config)


def _admit_new_pod(
    request: AdmissionRequest, pod: Mapping[str, Any], config: AdmissionConfig
) -> dict[str, Any]:
    uid = request.uid
    # The scheduler's parser must take the pod as a whole (a mutating webhook may see it before its
    # generated name is set).
    meta = guards.field_map(pod, "metadata")
    named = {**pod, "metadata": {**meta, "name": meta.get("name") or request.name or "(generated)"}}
    try:
        parsed = parse_pod(named)
    except InvalidObject as exc:
        return response(uid, allowed=False, code=400, message=f"malformed pod: {exc}")
    try:
        _, limits = pod_resources(guards.field_map(pod, "spec"))
    except InvalidObject as exc:
        return response(uid, allowed=False, message=f"invalid pod: {exc}")
    try:
        gpu = parse_gpu_request(
            guards.annotations_of(pod),
            {WHOLE_GPU_RESOURCE: limits[WHOLE_GPU_RESOURCE]} if WHOLE_GPU_RESOURCE in limits else {},
            max_gpu_memory_mib=config.max_gpu_memory_mib,
        )
    except InvalidGPURequest as exc:
        return response(uid, allowed=False, message=f"invalid GPU request: {exc}")
    if parsed.error:  # anything else the scheduler would refuse (a priority out of range...)
        return response(uid, allowed=False, message=f"invalid pod: {parsed.error}")
    problem = (
        guards.placement_problem(pod, config.scheduler_name, gpu_request=gpu.kind != "none")
        or _check_queue(pod, config, request.namespace)
        or _slice_problem(pod, gpu)
    )
    if problem:
        return response(uid, allowed=False, message=problem)
    return response(uid, allowed=True, patch=_slice_patch(pod, gpu))


def _slice_problem(pod: Mapping[str, Any], gpu: GPURequest) -> str | None:
    """Tessera alone sets the slice limit, on the first container, to the number of devices. (The API
    server copies a limit of an extended resource into the requests: an equal request is the same.)"""
    spec = guards.field_map(pod, "spec")
    present = {
        (kind, i): {
            f: guards.field_map(c, "resources", f).get(GPU_SLICE_RESOURCE) for f in ("limits", "requests")
        }
        for kind in ("initContainers", "containers")
        for i, c in enumerate(spec.get(kind) or [])
        if any(GPU_SLICE_RESOURCE in guards.field_map(c, "resources", f) for f in ("limits", "requests"))
    }
    if not present:
        return None
    if not gpu.is_fractional:
        return (
            f"resources.limits[{GPU_SLICE_RESOURCE}] is set by Tessera for gpu-fraction and gpu-memory "
            "pods only; remove it"
        )
    first = present.get(("containers", 0), {})
    wanted = str(gpu.num_devices)
    if (
        set(present) != {("containers", 0)}
        or str(first["limits"]) != wanted
        or (first["requests"] is not None and str(first["requests"]) != wanted)
    ):
        return (
            f"resources.limits[{GPU_SLICE_RESOURCE}]={first.get('limits')} disagrees with the GPU request "
            f"({gpu.describe()}); leave it out, Tessera sets it"
        )
    return None


def _slice_patch(pod: Mapping[str, Any], gpu: GPURequest) -> list[dict[str, Any]] | None:
    """The JSON patch giving the first container its slice limit (None when none is needed)."""
    containers = guards.field_map(pod, "spec").get("containers") or []
    if not gpu.is_fractional or not containers:
        return None
    resources = containers[0].get("resources")
    limits = (resources or {}).get("limits")
    if GPU_SLICE_RESOURCE in (limits or {}):
        return None  # already right (_slice_problem checked it)
    wanted = str(gpu.num_devices)
    base = "/spec/containers/0/resources"
    key = GPU_SLICE_RESOURCE.replace("~", "~0").replace("/", "~1")
    if resources is None:
        return [{"op": "add", "path": base, "value": {"limits": {GPU_SLICE_RESOURCE: wanted}}}]
    if limits is None:
        return [{"op": "add", "path": f"{base}/limits", "value": {GPU_SLICE_RESOURCE: wanted}}]
    return [{"op": "add", "path": f"{base}/limits/{key}", "value": wanted}]


def _check_queue(pod: Mapping[str, Any], config: AdmissionConfig, namespace: str | None) -> str | None:
    labels = guards.labels_of(pod)
    queue = labels.get(QUEUE_LABEL) or labels.get(KAI_QUEUE_LABEL)
    name = str(queue or DEFAULT_QUEUE)
    where = guards.field_map(pod, "metadata").get("namespace") or namespace or "default"
    if config.queue_lookup is not None:
        kind = config.queue_lookup(name)
        if kind is None:
            if queue:
                return f'queue "{name}" (label {QUEUE_LABEL}) does not exist'
            return f'the pod has no {QUEUE_LABEL} label and the "{DEFAULT_QUEUE}" queue does not exist'
        if kind == "parent":
            return f'queue "{name}" is a parent queue; pods must name a leaf queue in {QUEUE_LABEL}'
    if config.namespace_check is not None:
        return config.namespace_check(name, str(where))
    return None


def _admit_podgroup(request: AdmissionRequest, config: AdmissionConfig) -> dict[str, Any]:
    group = request.object or {}
    old = request.old_object or {}
    spec, old_spec = guards.field_map(group, "spec"), guards.field_map(old, "spec")
    meta = guards.field_map(group, "metadata")
    name = f"{meta.get('namespace') or request.namespace}/{meta.get('name') or request.name}"
    if request.operation == "UPDATE":
        running = guards.field_map(old, "status").get("running")
        changed = [f for f in FROZEN_WHILE_RUNNING if spec.get(f) != old_spec.get(f)]
        if changed and isinstance(running, int) and not isinstance(running, bool) and running > 0:
            return response(request.uid, allowed=False, message=(
                f"PodGroup {name} has {running} running pod{'s' if running != 1 else ''}: its "
                f"{', '.join(changed)} cannot change while they run (what a running gang is charged to "
                "and whether it may be preempted are fixed when it starts); change it once they have "
                "finished, or delete them first"
            ))  # fmt: skip
        if spec.get("queue") == old_spec.get("queue"):
            return response(request.uid, allowed=True)
    queue = str(spec.get("queue") or DEFAULT_QUEUE)
    problem = None
    if config.queue_lookup is not None:
        kind = config.queue_lookup(queue)
        if kind is None:
            problem = f'queue "{queue}" (spec.queue of PodGroup {name}) does not exist'
        elif kind == "parent":
            problem = f'queue "{queue}" is a parent queue; a PodGroup must name a leaf queue in spec.queue'
    if problem is None and config.namespace_check is not None:
        problem = config.namespace_check(queue, str(meta.get("namespace") or request.namespace or "default"))
    return response(request.uid, allowed=problem is None, message=problem or "")
