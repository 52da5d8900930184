"""The owner walk: from a pod up its controller owner references to the top owner, across every API group
(the core group included: an LWS worker StatefulSet is owned by its leader Pod, Spark executors by their
driver Pod).

Every owner read is checked against the reference's UID, as KAI does: a workload deleted and re-created
under the same name is a different workload, and its old pods must not be grouped with the new one's.
Where an owner cannot be read (not allowed, gone, API error) the walk stops there and that owner is known
only by its reference; the chain says why, and the podgrouper reports it on the pod.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.kube.podgrouper.model import Obj, meta

MAX_DEPTH = 10


@dataclass(frozen=True)
class Found:
    obj: Obj | None
    problem: str = ""  # why not, when obj is None


# (namespace, owner reference) -> the owner, checked against the reference's UID.
OwnerLookup = Callable[[str, Mapping[str, Any]], Found]


@dataclass(frozen=True)
class Chain:
    owners: tuple[Obj, ...]  # nearest first
    complete: bool = True  # False: the last owner is only its reference (`problem` says why)
    problem: str = ""


def controller_ref(obj: Obj) -> Mapping[str, Any] | None:
    refs = [r for r in meta(obj).get("ownerReferences") or [] if isinstance(r, Mapping)]
    return next((r for r in refs if r.get("controller")), refs[0] if refs else None)


def stub(ref: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """An owner known only by its reference."""
    return {
        "apiVersion": str(ref.get("apiVersion") or ""),
        "kind": str(ref.get("kind") or ""),
        "metadata": {
            "name": str(ref.get("name") or ""),
            "uid": str(ref.get("uid") or ""),
            "namespace": namespace,
        },
    }


def owner_chain(pod: Obj, lookup: OwnerLookup) -> Chain:
    namespace = str(meta(pod).get("namespace") or "default")
    owners: list[Obj] = []
    seen = {str(meta(pod).get("uid") or "")}
    current: Obj = pod
    for _ in range(MAX_DEPTH):
        ref = controller_ref(current)
        if ref is None:
            break
        uid = str(ref.get("uid") or "")
        if uid and uid in seen:  # an ownership cycle: stop rather than loop
            break
        found = lookup(namespace, ref)
        if found.obj is None:
            owners.append(stub(ref, namespace))
            return Chain(tuple(owners), complete=False, problem=found.problem)
        owner = found.obj
        if not owner.get("kind") or not owner.get("apiVersion"):  # items of a list carry neither
            owner = {**owner, "kind": ref.get("kind"), "apiVersion": ref.get("apiVersion")}
        owners.append(owner)
        seen.add(uid)
        current = owner
    return Chain(tuple(owners))
