"""AdmissionReview handling for pods (pure: review JSON in, review JSON out).

On CREATE of a pod of the Tessera scheduler: the GPU request must parse (`parse_gpu_request`) and its
queue must exist and be a leaf; a fractional request gets the `tessera.dev/gpu-slice: <num devices>` limit
on its first container, so the kubelet calls Tessera's device plugin for it. On UPDATE the GPU request
annotations are frozen. On any pod, only the scheduler's identities may add, change or remove
`tessera.dev/gpu-assignment`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from scheduler.api.gpu_request import InvalidGPURequest, parse_gpu_request
from scheduler.api.keys import (
    DEFAULT_QUEUE,
    GPU_ASSIGNMENT,
    GPU_FRACTION,
    GPU_FRACTION_NUM_DEVICES,
    GPU_MEMORY,
    GPU_SLICE_RESOURCE,
    KAI_QUEUE_LABEL,
    QUEUE_LABEL,
    SCHEDULER_NAME,
)
from scheduler.webhook.review import AdmissionRequest, AdmissionReview, response

QueueKind = Literal["leaf", "parent"]
# Queue name -> "leaf" / "parent", or None when no such queue exists.
QueueLookup = Callable[[str], QueueKind | None]

_REQUEST_KEYS = (GPU_FRACTION, GPU_MEMORY, GPU_FRACTION_NUM_DEVICES)


@dataclass(frozen=True)
class AdmissionConfig:
    scheduler_name: str = SCHEDULER_NAME
    # Who may write the assignment annotation: the scheduler's service account (and the device plugin's,
    # when the chart says so).
    privileged_users: frozenset[str] = field(
        default_factory=lambda: frozenset({"system:serviceaccount:tessera-system:tessera-scheduler"})
    )
    queue_lookup: QueueLookup | None = None  # None: queues are not checked here (the scheduler still does)
    max_gpu_memory_mib: int | None = None


def admit(review: Any, config: AdmissionConfig) -> dict[str, Any]:
    """Answer one AdmissionReview. Malformed reviews are refused with a message, never raise."""
    uid = str(review.get("request", {}).get("uid", "")) if isinstance(review, Mapping) else ""
    try:
        request = AdmissionReview.model_validate(review).request
    except ValidationError as exc:
        first = str(exc).splitlines()
        return response(
            uid,
            allowed=False,
            code=400,
            message=f"malformed AdmissionReview: {first[0] if first else 'invalid'}",
        )
    if request.kind.kind != "Pod" or request.resource.resource != "pods" or request.sub_resource:
        return response(request.uid, allowed=True)
    if request.operation not in ("CREATE", "UPDATE"):
        return response(request.uid, allowed=True)
    try:
        return _admit_pod(request, config)
    except (AttributeError, TypeError, ValueError) as exc:  # a pod shaped wrongly (e.g. spec a list)
        return response(
            request.uid, allowed=False, code=400, message=f"malformed pod: {type(exc).__name__}: {exc}"
        )


def _admit_pod(request: AdmissionRequest, config: AdmissionConfig) -> dict[str, Any]:
    pod = request.object or {}
    old = request.old_object or {}
    denied = _guard_assignment(request, pod, old, config)
    if denied:
        return response(request.uid, allowed=False, message=denied)
    if request.operation == "UPDATE":
        changed = [k for k in _REQUEST_KEYS if _annotations(pod).get(k) != _annotations(old).get(k)]
        if changed:
            return response(
                request.uid,
                allowed=False,
                message="GPU request annotations cannot change after the pod was created: "
                + ", ".join(changed),
            )
        return response(request.uid, allowed=True)
    if (pod.get("spec") or {}).get("schedulerName") != config.scheduler_name:
        return response(request.uid, allowed=True)
    return _admit_new_pod(request.uid, pod, config)


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _guard_assignment(
    request: AdmissionRequest, pod: Mapping[str, Any], old: Mapping[str, Any], config: AdmissionConfig
) -> str | None:
    before, after = _annotations(old).get(GPU_ASSIGNMENT), _annotations(pod).get(GPU_ASSIGNMENT)
    if before == after or request.user_info.username in config.privileged_users:
        return None
    return (
        f"only the Tessera scheduler may set annotation {GPU_ASSIGNMENT}; "
        f"{request.user_info.username or 'this user'} may not"
    )


def _limits(pod: Mapping[str, Any]) -> dict[str, object]:
    """Sum of the containers' limits for the GPU resources (what parse_gpu_request reads)."""
    total: dict[str, object] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        for name, value in ((container.get("resources") or {}).get("limits") or {}).items():
            if name in total:
                try:
                    total[name] = int(str(total[name])) + int(str(value))
                except ValueError:
                    total[name] = value  # parse_gpu_request reports the bad value
            else:
                total[name] = value
    return total


def _admit_new_pod(uid: str, pod: Mapping[str, Any], config: AdmissionConfig) -> dict[str, Any]:
    try:
        request = parse_gpu_request(
            _annotations(pod), _limits(pod), max_gpu_memory_mib=config.max_gpu_memory_mib
        )
    except InvalidGPURequest as exc:
        return response(uid, allowed=False, message=f"invalid GPU request: {exc}")
    queue_problem = _check_queue(pod, config)
    if queue_problem:
        return response(uid, allowed=False, message=queue_problem)
    if not request.is_fractional:
        return response(uid, allowed=True)
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        return response(uid, allowed=False, message="the pod has no containers to give the GPU share to")
    wanted = str(request.num_devices)
    resources = containers[0].get("resources")
    limits = (resources or {}).get("limits")
    present = (limits or {}).get(GPU_SLICE_RESOURCE)
    if present is not None:
        if str(present) != wanted:
            return response(
                uid,
                allowed=False,
                message=(
                    f"resources.limits[{GPU_SLICE_RESOURCE}]={present} disagrees with the GPU request "
                    f"({request.describe()}); leave it out, Tessera sets it"
                ),
            )
        return response(uid, allowed=True)
    base = "/spec/containers/0/resources"
    key = GPU_SLICE_RESOURCE.replace("~", "~0").replace("/", "~1")
    if resources is None:
        patch = [{"op": "add", "path": base, "value": {"limits": {GPU_SLICE_RESOURCE: wanted}}}]
    elif limits is None:
        patch = [{"op": "add", "path": f"{base}/limits", "value": {GPU_SLICE_RESOURCE: wanted}}]
    else:
        patch = [{"op": "add", "path": f"{base}/limits/{key}", "value": wanted}]
    return response(uid, allowed=True, patch=patch)


def _check_queue(pod: Mapping[str, Any], config: AdmissionConfig) -> str | None:
    if config.queue_lookup is None:
        return None
    labels = (pod.get("metadata") or {}).get("labels") or {}
    queue = labels.get(QUEUE_LABEL) or labels.get(KAI_QUEUE_LABEL)
    name = queue or DEFAULT_QUEUE
    kind = config.queue_lookup(name)
    if kind is None:
        if queue:
            return f'queue "{name}" (label {QUEUE_LABEL}) does not exist'
        return f'the pod has no {QUEUE_LABEL} label and the "{DEFAULT_QUEUE}" queue does not exist'
    if kind == "parent":
        return f'queue "{name}" is a parent queue; pods must name a leaf queue in {QUEUE_LABEL}'
    return None
