"""The fake API server's storage: objects, a global resourceVersion, and the watch history.

Every write bumps one global, monotonically increasing resourceVersion (as etcd's revision does) and appends
a watch event to a bounded history. A watch started from a resourceVersion older than the history answers
410 Gone, as the real server's watch cache does.
"""

from __future__ import annotations

import copy
import random
import string
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.fakes.errors import ApiError, conflict, not_found
from tests.fakes.patches import PatchError, json_patch, merge_patch, strategic_merge_patch
from tests.fakes.resources import ResourceType
from tests.fakes.selectors import parse_label_selector
from tests.fakes.strategies import prepare_create, prepare_update

Obj = dict[str, Any]
Key = tuple[str, str]  # (group, plural)
ObjKey = tuple[str, str]  # (namespace or "", name)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    key: Key
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj  # the object after the change (for DELETED: its last state, at the deletion's rv)
    old: Obj | None  # the object before the change (None for ADDED)


@dataclass
class EvictionRefusal:
    """A test-injected refusal of evictions (as a PodDisruptionBudget would refuse them)."""

    namespace: str | None
    name: str | None
    remaining: int | None  # None = until removed
    code: int = 429
    message: str = "Cannot evict pod as it would violate the pod's disruption budget."


@dataclass
class Store:
    history_limit: int = 10_000
    # When true, deleting a pod that is bound to a node only marks it terminating (deletionTimestamp), as a
    # real kubelet would still be stopping it; `complete_pod_deletions()` then removes it.
    graceful_pod_deletion: bool = False
    cond: threading.Condition = field(default_factory=lambda: threading.Condition(threading.RLock()))
    rv: int = 1
    floor: int = 1  # history holds every event with rv > floor
    types: dict[Key, ResourceType] = field(default_factory=dict)
    objects: dict[Key, dict[ObjKey, Obj]] = field(default_factory=dict)
    history: list[WatchEvent] = field(default_factory=list)
    eviction_refusals: list[EvictionRefusal] = field(default_factory=list)

    # ---- types -------------------------------------------------------------------------------------------
    def register(self, rt: ResourceType) -> None:
        with self.cond:
            self.types[rt.key] = rt
            self.objects.setdefault(rt.key, {})

    def lookup(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self.types.get((group, plural))
        if rt is None or rt.version != version:
            raise ApiError(404, "the server could not find the requested resource")
        return rt

    def by_kind(self, api_version: str, kind: str) -> ResourceType:
        for rt in self.types.values():
            if rt.api_version == api_version and rt.kind == kind:
                return rt
        raise KeyError(f"no resource type registered for {api_version} {kind}")

    def plurals(self, group: str, version: str) -> set[str]:
        return {rt.plural for rt in self.types.values() if rt.group == group and rt.version == version}

    # ---- reads -------------------------------------------------------------------------------------------
    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        with self.cond:
            obj = self.objects[rt.key].get((namespace or "", name))
            if obj is None:
                raise not_found(rt.plural, name, rt.group)
            return copy.deepcopy(obj)

    def select(
        self, rt: ResourceType, namespace: str | None, match: Callable[[Obj], bool] = lambda _: True
    ) -> tuple[list[Obj], int]:
        with self.cond:
            items = [
                copy.deepcopy(obj)
                for (ns, _), obj in sorted(self.objects[rt.key].items())
                if (namespace is None or ns == namespace) and match(obj)
            ]
            return items, self.rv

    def events_after(self, cursor: int) -> tuple[list[WatchEvent], int]:
        """Events with rv > cursor and the current rv; raises 410 when the history no longer reaches back."""
        with self.cond:
            if cursor < self.floor:
                raise ApiError(
                    410, f"too old resource version: {cursor} ({self.floor + 1})", reason="Expired"
                )
            lo, hi = 0, len(self.history)
            while lo < hi:
                mid = (lo + hi) // 2
                if self.history[mid].rv <= cursor:
                    lo = mid + 1
                else:
                    hi = mid
            return self.history[lo:], self.rv

    def expire_history(self) -> int:
        """Forget all watch history: a watch from any resourceVersion before now gets 410 Gone."""
        with self.cond:
            self.history.clear()
            self.floor = self.rv
            self.cond.notify_all()
            return self.floor

    # ---- writes ------------------------------------------------------------------------------------------
    def _commit(self, rt: ResourceType, okey: ObjKey, new: Obj | None, old: Obj | None) -> Obj:
        self.rv += 1
        bucket = self.objects[rt.key]
        if new is None:
            assert old is not None
            final = copy.deepcopy(old)
            final["metadata"]["resourceVersion"] = str(self.rv)
            bucket.pop(okey, None)
            event = WatchEvent(self.rv, rt.key, "DELETED", final, old)
            result = final
        else:
            new["metadata"]["resourceVersion"] = str(self.rv)
            bucket[okey] = new
            event = WatchEvent(self.rv, rt.key, "ADDED" if old is None else "MODIFIED", new, old)
            result = new
        self.history.append(event)
        if len(self.history) > self.history_limit:
            dropped = self.history[: len(self.history) - self.history_limit]
            del self.history[: len(dropped)]
            self.floor = dropped[-1].rv
        self.cond.notify_all()
        return copy.deepcopy(result)

    def _priority_of(self, class_name: str | None) -> tuple[str | None, int] | None:
        classes = self.objects.get(("scheduling.k8s.io", "priorityclasses"), {})
        if class_name:
            pc = classes.get(("", class_name))
            if pc is None:
                return (class_name, 2_000_000_000) if class_name.startswith("system-") else None
            return class_name, int(pc.get("value", 0))
        default = next((pc for pc in classes.values() if pc.get("globalDefault")), None)
        return (default["metadata"]["name"], int(default.get("value", 0))) if default else (None, 0)

    def _check_namespace(self, rt: ResourceType, namespace: str | None) -> str:
        if not rt.namespaced:
            return ""
        if not namespace:
            raise ApiError(400, "the namespace of the object does not match the namespace on the request")
        if ("", namespace) not in self.objects[("", "namespaces")]:
            raise not_found("namespaces", namespace)
        return namespace

    def create(self, rt: ResourceType, namespace: str | None, body: Any, dry_run: bool = False) -> Obj:
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request was not a JSON object")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        with self.cond:
            if rt.namespaced and meta.get("namespace") not in (None, "", namespace):
                raise ApiError(
                    400,
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            ns = self._check_namespace(rt, namespace)
            if not meta.get("name"):
                if not meta.get("generateName"):
                    raise ApiError(
                        422,
                        f"{rt.kind} is invalid: metadata.name: Required value: "
                        "name or generateName is required",
                    )
                meta["name"] = meta["generateName"] + "".join(
                    random.choices(string.ascii_lowercase + string.digits, k=5)
                )
            name = meta["name"]
            if (ns, name) in self.objects[rt.key]:
                raise ApiError(
                    409,
                    f'{rt.plural} "{name}" already exists',
                    reason="AlreadyExists",
                    details={"name": name, "group": rt.group, "kind": rt.plural},
                )
            obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
            if rt.namespaced:
                meta["namespace"] = ns
            else:
                meta.pop("namespace", None)
            for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(key, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta["generation"] = 1
            prepare_create(rt, obj, self._priority_of)
            if dry_run:
                return obj
            return self._commit(rt, (ns, name), obj, None)

    def replace(
        self, rt: ResourceType, namespace: str | None, name: str, body: Any, subresource: str | None = None
    ) -> Obj:
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise ApiError(400, "the body of the request was not a JSON object")
        with self.cond:
            old = self.get(rt, namespace, name)
            new = copy.deepcopy(body)
            meta = new.setdefault("metadata", {})
            if meta.get("name", name) != name:
                raise ApiError(
                    400,
                    f"the name of the object ({meta.get('name')}) does not match "
                    f"the name on the URL ({name})",
                )
            meta["name"] = name
            _check_version(rt, name, old, meta.get("resourceVersion"))
            return self._store_update(rt, old, new, subresource)

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        content_type: str,
        patch: Any,
        subresource: str | None = None,
    ) -> Obj:
        with self.cond:
            old = self.get(rt, namespace, name)
            try:
                if content_type == "application/json-patch+json":
                    new = json_patch(old, patch)
                elif content_type == "application/merge-patch+json":
                    new = merge_patch(old, patch)
                elif content_type == "application/strategic-merge-patch+json":
                    if not rt.builtin:
                        raise ApiError(
                            415,
                            "the body of the request was in an unknown format - accepted media "
                            "types include: application/json-patch+json, application/merge-patch+json, "
                            "application/apply-patch+yaml",
                        )
                    new = strategic_merge_patch(old, patch)
                else:
                    raise ApiError(415, f"the body of the request was in an unknown format: {content_type}")
            except PatchError as exc:
                raise ApiError(422, str(exc)) from None
            if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
                raise ApiError(422, "the patched object is not a Kubernetes object")
            if new["metadata"].get("name") != name:
                raise ApiError(422, "metadata.name: Invalid value: the name may not be changed by a patch")
            _check_version(rt, name, old, new["metadata"].get("resourceVersion"))
            return self._store_update(rt, old, new, subresource)

    def _store_update(self, rt: ResourceType, old: Obj, new: Obj, subresource: str | None) -> Obj:
        stored = prepare_update(rt, old, new, subresource)
        okey = (old["metadata"].get("namespace", ""), old["metadata"]["name"])
        if stored["metadata"].get("deletionTimestamp") and not stored["metadata"].get("finalizers"):
            pending_kubelet = self._awaits_kubelet(rt, stored)
            if not pending_kubelet:
                return self._commit(rt, okey, None, old)
        if _without_rv(stored) == _without_rv(old):
            # A no-op write keeps the resourceVersion and sends no watch event, as on a real server.
            return copy.deepcopy(old)
        return self._commit(rt, okey, stored, old)

    def _awaits_kubelet(self, rt: ResourceType, obj: Obj) -> bool:
        return (
            self.graceful_pod_deletion
            and rt.key == ("", "pods")
            and bool(obj.get("spec", {}).get("nodeName"))
            and obj["metadata"].get("deletionGracePeriodSeconds", 0) > 0
        )

    def delete(self, rt: ResourceType, namespace: str | None, name: str, options: Any = None) -> Obj:
        options = options if isinstance(options, dict) else {}
        with self.cond:
            old = self.get(rt, namespace, name)
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
                raise conflict(
                    rt.plural,
                    name,
                    f"Precondition failed: UID in precondition: {pre['uid']}, UID in "
                    f"object meta: {old['metadata']['uid']}",
                    rt.group,
                )
            if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise conflict(rt.plural, name, "Precondition failed: resourceVersion mismatch", rt.group)
            okey = (old["metadata"].get("namespace", ""), name)
            grace = options.get("gracePeriodSeconds")
            if grace is None:
                grace = (
                    old.get("spec", {}).get("terminationGracePeriodSeconds", 30)
                    if rt.key == ("", "pods")
                    else 0
                )
            marked = copy.deepcopy(old)
            marked["metadata"].setdefault("deletionTimestamp", now_rfc3339())
            marked["metadata"]["deletionGracePeriodSeconds"] = int(grace)
            if old["metadata"].get("finalizers") or self._awaits_kubelet(rt, marked):
                if old["metadata"].get("deletionTimestamp"):
                    return old
                return self._commit(rt, okey, marked, old)
            if rt.key == ("", "namespaces"):
                self._delete_namespace_contents(name)
            return self._commit(rt, okey, None, old)

    def _delete_namespace_contents(self, namespace: str) -> None:
        for key, bucket in self.objects.items():
            rt = self.types[key]
            for okey in [k for k in bucket if k[0] == namespace and rt.namespaced]:
                self._commit(rt, okey, None, bucket[okey])

    def complete_pod_deletions(self) -> int:
        """Act as the kubelets: remove every terminating pod. Returns how many were removed."""
        with self.cond:
            rt = self.types[("", "pods")]
            doomed = [
                (k, o)
                for k, o in self.objects[rt.key].items()
                if o["metadata"].get("deletionTimestamp") and not o["metadata"].get("finalizers")
            ]
            for okey, obj in doomed:
                self._commit(rt, okey, None, obj)
            return len(doomed)

    # ---- subresources ------------------------------------------------------------------------------------
    def bind(self, namespace: str, name: str, binding: Any) -> None:
        if not isinstance(binding, dict) or not isinstance(binding.get("target"), dict):
            raise ApiError(400, "a Binding needs a target")
        target = binding["target"]
        if target.get("kind", "Node") not in ("Node", "") or not target.get("name"):
            raise ApiError(422, f"Binding is invalid: target: must be a Node with a name, got {target!r}")
        rt = self.types[("", "pods")]
        with self.cond:
            pod = self.get(rt, namespace, name)
            meta = binding.get("metadata") or {}
            if meta.get("uid") and meta["uid"] != pod["metadata"]["uid"]:
                raise conflict("pods/binding", name, "Precondition failed: UID mismatch")
            if pod["metadata"].get("deletionTimestamp"):
                raise conflict(
                    "pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host"
                )
            node = pod.get("spec", {}).get("nodeName")
            if node:
                raise conflict("pods/binding", name, f'pod {name} is already assigned to node "{node}"')
            new = copy.deepcopy(pod)
            new["spec"]["nodeName"] = target["name"]
            for k, v in (meta.get("annotations") or {}).items():
                new["metadata"].setdefault("annotations", {})[k] = v
            conditions = [
                c
                for c in new.setdefault("status", {}).get("conditions", [])
                if c.get("type") != "PodScheduled"
            ]
            conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()})
            new["status"]["conditions"] = conditions
            self._commit(rt, (namespace, name), new, pod)

    def evict(self, namespace: str, name: str, eviction: Any) -> None:
        rt = self.types[("", "pods")]
        with self.cond:
            pod = self.get(rt, namespace, name)
            for refusal in list(self.eviction_refusals):
                if refusal.namespace in (None, namespace) and refusal.name in (None, name):
                    if refusal.remaining is not None:
                        refusal.remaining -= 1
                        if refusal.remaining <= 0:
                            self.eviction_refusals.remove(refusal)
                    raise ApiError(
                        refusal.code,
                        refusal.message,
                        details={"causes": [{"reason": "DisruptionBudget", "message": refusal.message}]},
                    )
            self._check_disruption_budgets(pod)
            options = eviction.get("deleteOptions") if isinstance(eviction, dict) else None
            self.delete(rt, namespace, name, options)

    def _check_disruption_budgets(self, pod: Obj) -> None:
        """Refuse the eviction when a PodDisruptionBudget covering the pod has no disruption left.

        The real server reads `status.disruptionsAllowed` kept by the disruption controller; here it is
        computed on the spot from the pods (healthy = Running with Ready not False, not terminating).
        """
        namespace = pod["metadata"]["namespace"]
        pdbs = [
            o for (ns, _), o in self.objects[("policy", "poddisruptionbudgets")].items() if ns == namespace
        ]
        pods = [o for (ns, _), o in self.objects[("", "pods")].items() if ns == namespace]
        for pdb in pdbs:
            selector = (pdb.get("spec") or {}).get("selector") or {}
            labels_text = ",".join(f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items())
            match = parse_label_selector(labels_text)
            if not match(pod["metadata"].get("labels") or {}):
                continue
            covered = [p for p in pods if match(p["metadata"].get("labels") or {})]
            healthy = sum(1 for p in covered if _healthy(p))
            spec = pdb["spec"]
            if "minAvailable" in spec:
                allowed = healthy - _scaled(spec["minAvailable"], len(covered))
            else:
                allowed = _scaled(spec.get("maxUnavailable", 0), len(covered)) - (len(covered) - healthy)
            if allowed <= 0 and _healthy(pod):
                msg = (
                    f"The disruption budget {pdb['metadata']['name']} needs "
                    f"{healthy - allowed} healthy pods and has {healthy} currently"
                )
                raise ApiError(
                    429,
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    details={"causes": [{"reason": "DisruptionBudget", "message": msg}]},
                )

    # ---- direct access for tests (no admission rules) -----------------------------------------------------
    def put_raw(self, rt: ResourceType, obj: Obj) -> Obj:
        with self.cond:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            ns = meta.get("namespace", "default") if rt.namespaced else ""
            if rt.namespaced:
                meta["namespace"] = ns
            obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
            old = self.objects[rt.key].get((ns, meta["name"]))
            meta.setdefault("uid", old["metadata"]["uid"] if old else str(uuid.uuid4()))
            meta.setdefault(
                "creationTimestamp", old["metadata"]["creationTimestamp"] if old else now_rfc3339()
            )
            return self._commit(rt, (ns, meta["name"]), obj, copy.deepcopy(old) if old else None)

    def remove_raw(self, rt: ResourceType, namespace: str | None, name: str) -> None:
        with self.cond:
            okey = (namespace or "", name) if rt.namespaced else ("", name)
            old = self.objects[rt.key].get(okey)
            if old is None:
                raise not_found(rt.plural, name, rt.group)
            self._commit(rt, okey, None, old)

    def all_objects(self) -> Iterable[tuple[ResourceType, Obj]]:
        with self.cond:
            return [(self.types[k], copy.deepcopy(o)) for k, b in self.objects.items() for o in b.values()]


def _without_rv(obj: Obj) -> Obj:
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


def _healthy(pod: Obj) -> bool:
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    ready = next((c for c in status.get("conditions", []) if c.get("type") == "Ready"), None)
    return ready is None or ready.get("status") == "True"


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return -(-int(value[:-1]) * total // 100)
    return int(value)


def _check_version(rt: ResourceType, name: str, old: Obj, wanted: str | None) -> None:
    """Optimistic concurrency, as the real server: a write naming an older resourceVersion is a 409."""
    if wanted and wanted != old["metadata"]["resourceVersion"]:
        raise conflict(
            rt.plural,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
            rt.group,
        )
