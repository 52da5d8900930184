"""What the podgrouper reads (a pod, its owners, the pods already in its group) and what it decides (a group).

Objects are the plain dicts the API server returns; the helpers below read them defensively, since an
owner is written by another controller (or a user) and any field may be missing or of the wrong type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.api.keys import API_VERSION

Obj = Mapping[str, Any]


def meta(obj: Obj) -> Mapping[str, Any]:
    value = obj.get("metadata")
    return value if isinstance(value, Mapping) else {}


def spec(obj: Obj) -> Mapping[str, Any]:
    value = obj.get("spec")
    return value if isinstance(value, Mapping) else {}


def status(obj: Obj) -> Mapping[str, Any]:
    value = obj.get("status")
    return value if isinstance(value, Mapping) else {}


def labels(obj: Obj) -> Mapping[str, str]:
    value = meta(obj).get("labels")
    return value if isinstance(value, Mapping) else {}


def annotations_of(obj: Obj) -> Mapping[str, str]:
    value = meta(obj).get("annotations")
    return value if isinstance(value, Mapping) else {}


def name_of(obj: Obj) -> str:
    return str(meta(obj).get("name") or "")


def uid_of(obj: Obj) -> str:
    return str(meta(obj).get("uid") or "")


def kind_of(obj: Obj) -> str:
    return str(obj.get("kind") or "")


def api_group(obj_or_api_version: Obj | str) -> str:
    """The API group of an object or of an apiVersion string ("" for the core group)."""
    api_version = (
        obj_or_api_version
        if isinstance(obj_or_api_version, str)
        else str(obj_or_api_version.get("apiVersion") or "")
    )
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def dig(obj: Any, *path: str) -> Any:
    """obj[path[0]][path[1]]... or None where a step is missing or not a mapping."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def as_int(value: Any) -> int | None:
    """An integer field as controllers write it (int, or a numeric string in annotations); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def is_terminating(pod: Obj) -> bool:
    return bool(meta(pod).get("deletionTimestamp"))


def is_finished(pod: Obj) -> bool:
    return status(pod).get("phase") in ("Succeeded", "Failed")


def is_ready(pod: Obj) -> bool:
    """The pod's Ready condition is True (what controllers such as LWS and JobSet wait for)."""
    conditions = status(pod).get("conditions") or []
    return any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )


@dataclass(frozen=True)
class OwnerRef:
    api_version: str
    kind: str
    name: str
    uid: str

    @classmethod
    def of(cls, obj: Obj) -> OwnerRef:
        return cls(str(obj.get("apiVersion") or "v1"), kind_of(obj) or "Pod", name_of(obj), uid_of(obj))


@dataclass(frozen=True)
class GroupSpec:
    """The PodGroup the podgrouper wants for a pod: its identity (name, owner) and its spec."""

    name: str
    namespace: str
    min_member: int
    queue: str
    priority_class: str | None
    owner: OwnerRef | None  # garbage-collects the group with its workload; None for user-named groups
    preemptibility: str | None = None
    stale_grace_s: float | None = None
    explicit: bool = False  # named by the pod: the user manages it, the podgrouper never writes it
    rule: str = ""  # which rule decided (a kind, or "explicit"), for logs and events
    warnings: tuple[str, ...] = ()  # invalid settings that were ignored, reported on the pod
    topology: dict[str, str] | None = None  # topologyConstraint from the workload's annotations

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def spec_fields(self) -> dict[str, Any]:
        """The PodGroup spec as written; None values are absent (a merge patch with None removes them)."""
        return {
            "minMember": self.min_member,
            "queue": self.queue,
            "priorityClassName": self.priority_class,
            "preemptibility": self.preemptibility,
            "staleGraceSeconds": self.stale_grace_s,
            "topologyConstraint": self.topology,
        }

    def to_podgroup(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if self.owner is not None:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": self.owner.api_version,
                    "kind": self.owner.kind,
                    "name": self.owner.name,
                    "uid": self.owner.uid,
                    "controller": False,
                    "blockOwnerDeletion": False,
                }
            ]
        return {
            "apiVersion": API_VERSION,
            "kind": "PodGroup",
            "metadata": metadata,
            "spec": {k: v for k, v in self.spec_fields().items() if v is not None},
        }


MemberView = Callable[[str], Sequence[Obj]]
# (namespace, apiVersion, kind, name) -> the object, or None when it cannot be read.
Reader = Callable[[str, str, str, str], Obj | None]


@dataclass(frozen=True)
class Workload:
    """Everything a rule may read: the pod, its owners (nearest first, as read from the API server), the
    pods already known in a group (by group name), which PriorityClasses exist, and other objects of the
    pod's namespace (a rule that needs one more object than the owners, as KAI's RayJob grouper does)."""

    pod: Obj
    chain: tuple[Obj, ...] = ()
    known_members: MemberView = field(default=lambda _name: ())
    priority_class_exists: Callable[[str], bool] = field(default=lambda _name: True)
    reader: Reader = field(default=lambda _ns, _av, _kind, _name: None)

    @property
    def namespace(self) -> str:
        return str(meta(self.pod).get("namespace") or "default")

    @property
    def top(self) -> Obj:
        """The top owner; the pod itself when it has none."""
        return self.chain[-1] if self.chain else self.pod

    def nearest(self, *kinds: str) -> Obj | None:
        """The nearest owner of one of `kinds`, or None."""
        return next((obj for obj in self.chain if kind_of(obj) in kinds), None)

    def below(self, owner: Obj) -> Obj:
        """The object just below `owner` in the chain (the pod when `owner` is its direct owner)."""
        objs = (self.pod, *self.chain)
        for i in range(1, len(objs)):
            if objs[i] is owner:
                return objs[i - 1]
        return self.pod

    def read(self, api_version: str, kind: str, name: str) -> Obj | None:
        return self.reader(self.namespace, api_version, kind, name) if name else None

    def members(self, group: str) -> list[Obj]:
        """Live pods of `group`: those already known plus this pod, without terminating ones."""
        uid = uid_of(self.pod)
        pods = [p for p in self.known_members(group) if uid_of(p) != uid]
        pods.append(self.pod)
        return [p for p in pods if not is_terminating(p)]
