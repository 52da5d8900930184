"""Per-type write rules of the real API server that a scheduler can trip over.

- Pods: containers are required; on create the status is reset to Pending and the priority admission plugin
  resolves `priorityClassName` into `spec.priority` (unknown class -> 403); after create the spec is
  immutable except container images, tolerations and activeDeadlineSeconds, so `spec.nodeName` can only be
  set through the Binding subresource and container limits cannot be patched in afterwards.
- Types with a status subresource: writes to the object keep the stored status, `/status` writes change
  only the status. Custom resources also drop `status` on create.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.fakes.errors import ApiError
from tests.fakes.resources import ResourceType

PriorityLookup = Callable[[str | None], tuple[str | None, int] | None]

_MUTABLE_POD_SPEC = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")


def _invalid(kind: str, name: str, message: str) -> ApiError:
    return ApiError(422, f'{kind} "{name}" is invalid: {message}')


def prepare_create(rt: ResourceType, obj: dict[str, Any], priority_of: PriorityLookup) -> None:
    name = obj["metadata"]["name"]
    if rt.status_subresource and not rt.builtin:
        obj.pop("status", None)
    if rt.kind == "Pod" and rt.group == "":
        _prepare_pod_create(obj, name, priority_of)
    elif rt.kind == "Namespace" and rt.group == "":
        obj["status"] = {"phase": "Active"}


def _prepare_pod_create(obj: dict[str, Any], name: str, priority_of: PriorityLookup) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise _invalid("Pod", name, "spec: Required value")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise _invalid("Pod", name, "spec.containers: Required value")
    for i, c in enumerate(containers):
        if not isinstance(c, dict) or not c.get("name"):
            raise _invalid("Pod", name, f"spec.containers[{i}].name: Required value")
        if not c.get("image"):
            raise _invalid("Pod", name, f"spec.containers[{i}].image: Required value")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    resolved = priority_of(spec.get("priorityClassName"))
    if resolved is None:
        raise ApiError(
            403,
            f'pods "{name}" is forbidden: no PriorityClass with name '
            f"{spec.get('priorityClassName')} was found",
        )
    class_name, value = resolved
    if class_name is not None:
        spec["priorityClassName"] = class_name
    if "priority" in spec and spec["priority"] != value:
        raise ApiError(
            403,
            f'pods "{name}" is forbidden: the integer value of priority ({spec["priority"]}) must not be '
            f"provided in pod spec; priority admission controller computed {value} "
            "from the given PriorityClass name",
        )
    spec["priority"] = value
    obj["status"] = {"phase": "Pending"}


def prepare_update(
    rt: ResourceType, old: dict[str, Any], new: dict[str, Any], subresource: str | None
) -> dict[str, Any]:
    """Return the object to store for an update of `old` with `new` (already name/version checked)."""
    meta_keep = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace")
    for key in meta_keep:
        if key in old["metadata"]:
            new["metadata"][key] = old["metadata"][key]
        else:
            new["metadata"].pop(key, None)
    new["kind"], new["apiVersion"] = rt.kind, rt.api_version
    if subresource == "status":
        result = copy.deepcopy(old)
        if "status" in new:
            result["status"] = new["status"]
        else:
            result.pop("status", None)
        return result
    if rt.status_subresource:
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
    if rt.kind == "Pod" and rt.group == "":
        _check_pod_spec_update(old, new)
    if old.get("spec") != new.get("spec"):
        new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
    else:
        new["metadata"]["generation"] = old["metadata"].get("generation", 1)
    return new


def _check_pod_spec_update(old: dict[str, Any], new: dict[str, Any]) -> None:
    old_spec, new_spec = copy.deepcopy(old.get("spec", {})), copy.deepcopy(new.get("spec", {}))
    for spec in (old_spec, new_spec):
        for key in _MUTABLE_POD_SPEC:
            spec.pop(key, None)
        for group in ("containers", "initContainers"):
            for c in spec.get(group, []) or []:
                if isinstance(c, dict):
                    c.pop("image", None)
    if old_spec != new_spec:
        name = old["metadata"]["name"]
        raise _invalid(
            "Pod",
            name,
            "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
            "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, "
            "`spec.tolerations` (only additions to existing tolerations), "
            "`spec.terminationGracePeriodSeconds`",
        )
