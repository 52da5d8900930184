"""What no one but Tessera's own components may write on a pod, and what may not change once it is set.

* `tessera.dev/gpu-assignment` is the scheduler's decision and the device plugin trusts it: only the
  scheduler's identities may add, change or remove it (DESIGN.md, hand-off step 1).
* `tessera.dev/gpu-allocated` tells the scheduler the device plugin served the pod and its node may take
  the next one: only the device plugin's identities may write it (a user who preset it would have the
  scheduler send the node a second pod awaiting `Allocate` before the first was served, and the plugin
  could not tell them apart).
* The GPU request annotations are frozen after creation; the queue and the pod group of a bound pod are
  frozen too (it is charged to its queue through its job; relabelling it, or annotating it into another
  group, would move or drop that charge).
* A pod that asks for `tessera.dev/gpu-slice`, or a Tessera pod that asks for any GPU, must be placed by
  the scheduler: not a pod of another scheduler and not one whose author set `spec.nodeName`. Such a pod
  has no assignment: a slice is a share of a GPU only the scheduler can give (the device plugin has
  nothing to serve it with), and a Tessera pod on a node of its author's choosing would bypass its
  queue. (Pods of other schedulers asking for whole GPUs are served GPUs nobody holds, as NVIDIA's
  plugin would: DESIGN.md step 3.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.api.keys import (
    GPU_ALLOCATED,
    GPU_ASSIGNMENT,
    GPU_FRACTION,
    GPU_FRACTION_NUM_DEVICES,
    GPU_MEMORY,
    GPU_SLICE_RESOURCE,
    KAI_POD_GROUP,
    KAI_QUEUE_LABEL,
    POD_GROUP,
    QUEUE_LABEL,
)

REQUEST_KEYS = (GPU_FRACTION, GPU_MEMORY, GPU_FRACTION_NUM_DEVICES)
QUEUE_KEYS = (QUEUE_LABEL, KAI_QUEUE_LABEL)
GROUP_KEYS = (POD_GROUP, KAI_POD_GROUP)


def field_map(obj: Mapping[str, Any], *path: str) -> Mapping[str, Any]:
    """A nested map field; absent is empty. (A field of the wrong shape raises TypeError: the caller
    answers "malformed pod".)"""
    node: Any = obj
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
        if node is None:
            return {}
        if not isinstance(node, Mapping):
            raise TypeError(f"{'.'.join(path)} is not a map")
    return node


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return field_map(obj, "metadata", "annotations")


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return field_map(obj, "metadata", "labels")


def node_name(obj: Mapping[str, Any]) -> str | None:
    value = field_map(obj, "spec").get("nodeName")
    return str(value) if value else None


def containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = field_map(pod, "spec")
    out: list[Mapping[str, Any]] = []
    for kind in ("initContainers", "containers"):
        items = spec.get(kind) or []
        if not isinstance(items, list) or not all(isinstance(c, Mapping) for c in items):
            raise TypeError(f"spec.{kind} is not a list of containers")
        out.extend(items)
    return out


def asks_for(pod: Mapping[str, Any], resource: str) -> bool:
    """Whether any container (or init container) requests or limits `resource`."""
    return any(
        resource in field_map(c, "resources", field)
        for c in containers(pod)
        for field in ("limits", "requests")
    )


def writer_problem(
    user: str,
    pod: Mapping[str, Any],
    old: Mapping[str, Any],
    *,
    assignment_writers: frozenset[str],
    allocation_writers: frozenset[str],
) -> str | None:
    """Why `user` may not make this change to the scheduler's or the device plugin's annotations."""
    for key, writers, owner in (
        (GPU_ASSIGNMENT, assignment_writers, "the Tessera scheduler"),
        (GPU_ALLOCATED, allocation_writers, "Tessera's device plugin"),
    ):
        if annotations_of(pod).get(key) != annotations_of(old).get(key) and user not in writers:
            return f"only {owner} may set annotation {key}; {user or 'this user'} may not"
    return None


def frozen_problem(pod: Mapping[str, Any], old: Mapping[str, Any]) -> str | None:
    """Why this UPDATE changes something that must not change now."""
    changed = [k for k in REQUEST_KEYS if annotations_of(pod).get(k) != annotations_of(old).get(k)]
    if changed:
        return "GPU request annotations cannot change after the pod was created: " + ", ".join(changed)
    if node_name(old):
        moved = [k for k in QUEUE_KEYS if labels_of(pod).get(k) != labels_of(old).get(k)]
        if moved:
            return (
                f"the queue of a bound pod cannot change (label {', '.join(moved)}); "
                "delete the pod and create it in the other queue"
            )
        regrouped = [k for k in GROUP_KEYS if annotations_of(pod).get(k) != annotations_of(old).get(k)]
        if regrouped:
            return (
                f"the pod group of a bound pod cannot change (annotation {', '.join(regrouped)}): it is "
                "charged to its group's queue while it runs; delete the pod and create it in the other group"
            )
    return None


def placement_problem(pod: Mapping[str, Any], scheduler_name: str, *, gpu_request: bool) -> str | None:
    """Why this new pod could take GPUs the scheduler did not give it (None when it cannot)."""
    slice_ = asks_for(pod, GPU_SLICE_RESOURCE)
    ours = field_map(pod, "spec").get("schedulerName") == scheduler_name
    if slice_ and not ours:
        return (
            f"resource {GPU_SLICE_RESOURCE} is served only to pods placed by the Tessera scheduler: "
            f"set spec.schedulerName: {scheduler_name}"
        )
    if (slice_ or (ours and gpu_request)) and node_name(pod):
        return (
            "a pod asking for a GPU share must be placed by the Tessera scheduler: "
            f"remove spec.nodeName ({node_name(pod)}) and use a nodeSelector instead"
        )
    return None
