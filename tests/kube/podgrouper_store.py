"""An in-memory object store for the podgrouper's rule tests: objects get UIDs as the API server gives them,
and owners are read by reference, checked against the reference's UID, as `OwnerReader` does; kinds the
podgrouper has no rule for are forbidden, as the chart's RBAC makes them."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from typing import Any

from scheduler.kube.podgrouper import kinds
from scheduler.kube.podgrouper.book import Decision, GroupBook
from scheduler.kube.podgrouper.model import GroupSpec, Obj
from scheduler.kube.podgrouper.walk import Found

Key = tuple[str, str, str, str]  # (namespace, API group, kind, name)


def _group(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


class Store:
    def __init__(
        self, priority_classes: tuple[str, ...] = ("train", "build", "inference", "build-preemptible")
    ):
        self.objects: dict[Key, dict[str, Any]] = {}
        self.priority_classes = set(priority_classes)
        self.book = GroupBook(
            self.lookup, reader=self.read, priority_class_exists=self.priority_classes.__contains__
        )

    @staticmethod
    def key(o: Mapping[str, Any]) -> Key:
        m = o["metadata"]
        return (m.get("namespace") or "default", _group(o["apiVersion"]), o["kind"], m["name"])

    def add(self, o: dict[str, Any]) -> dict[str, Any]:
        stored = copy.deepcopy(o)
        stored["metadata"].setdefault("uid", str(uuid.uuid4()))
        self.objects[self.key(stored)] = stored
        return stored

    def update(self, o: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
        """A new version of the object, as the API server returns one (the old one is left untouched)."""
        stored = {**self.objects[self.key(o)], **copy.deepcopy(fields)}
        self.objects[self.key(o)] = stored
        return stored

    def delete(self, o: Mapping[str, Any]) -> None:
        self.objects.pop(self.key(o), None)

    def lookup(self, namespace: str, ref: Mapping[str, Any]) -> Found:
        group = _group(ref["apiVersion"])
        if kinds.lookup(group, ref["kind"]) is None:  # the chart's RBAC: only the kinds with a rule
            return Found(
                None, f"forbidden: the scheduler may not read {ref['kind'].lower()}s.{group or 'core'}"
            )
        o = self.objects.get((namespace, _group(ref["apiVersion"]), ref["kind"], ref["name"]))
        if o is None:
            return Found(None, f"{ref['kind']} {ref['name']} not found (deleted)")
        if ref.get("uid") and o["metadata"]["uid"] != ref["uid"]:
            return Found(None, f"{ref['kind']} {ref['name']} was deleted and re-created")
        return Found(o)

    def read(self, namespace: str, api_version: str, kind: str, name: str) -> Obj | None:
        return self.objects.get((namespace, _group(api_version), kind, name))

    # ---- the podgrouper over the store -----------------------------------------------------------------------
    def observe(self, pod: Mapping[str, Any]) -> Decision:
        return self.book.observe(self.objects[self.key(pod)])

    def spec(self, pod: Mapping[str, Any]) -> GroupSpec:
        """The current spec of the pod's group, after deciding stale groups again."""
        self.book.take_pending()
        name = self.book.group_of(pod["metadata"]["uid"])
        assert name is not None, f"{pod['metadata']['name']} is its own job"
        group = self.book.group(f"{pod['metadata'].get('namespace') or 'default'}/{name}")
        assert group is not None
        return group.spec

    def changed(self, o: Mapping[str, Any]) -> None:
        """An owner's watch event reaches the podgrouper."""
        self.book.owner_changed(self.objects[self.key(o)])
