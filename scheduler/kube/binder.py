"""Binding a pod to its node, in the order the device plugin relies on.

1. write the decision on the pod (`tessera.dev/gpu-assignment`), guarded by the pod's uid;
2. take the node's bind lock (`tessera.dev/bind-lock`), guarded by the node's resourceVersion, so at most
   one assigned-but-unallocated GPU pod is pending per node; a lock whose pod was allocated, is gone, or
   is older than `lock_timeout_s` is free to take;
3. POST the Binding subresource.
Any failure undoes what was done (lock released if still ours, annotation removed) and the pod is retried
in a later cycle. Pods without GPUs skip steps 1 and 2.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.api.assignment import GPUAssignment
from scheduler.api.bind_lock import BindLock, allocation_confirmed
from scheduler.api.keys import BIND_LOCK, GPU_ASSIGNMENT

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class BindResult:
    ok: bool
    reason: str = ""
    retry: bool = True  # worth trying again in a later cycle
    busy: bool = False  # the node's bind lock is held by another pod: wait for it, nothing is wrong


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def api_reason(exc: ApiException) -> str:
    """The server's one-line message out of an ApiException."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return f"{exc.status} {exc.reason}"


class Binder:
    def __init__(
        self,
        core: client.CoreV1Api,
        *,
        lock_timeout_s: float = 60.0,
        clock: Clock = lambda: datetime.now(UTC),
    ) -> None:
        self.core = core
        self.lock_timeout_s = lock_timeout_s
        self.clock = clock

    # ---- the three steps ---------------------------------------------------------------------------------
    def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        assignment: GPUAssignment | None,
        *,
        pod_has_annotations: bool | None = None,
    ) -> BindResult:
        """Bind; `pod_has_annotations` (from the watch cache) saves reading the pod before annotating it.

        Four requests for a GPU pod in the common case: read the node, annotate the pod, lock the node, bind.
        """
        annotated = locked = False
        try:
            if assignment is not None:
                # Look before writing anything: a busy node costs a read, not a write and its rollback.
                node_meta = self._node_meta(node)
                busy = self._busy(node_meta, node, uid)
                if busy:
                    return BindResult(False, busy, busy=True)
                self._annotate(namespace, name, uid, assignment, pod_has_annotations)
                annotated = True
                held = self._take_lock(node, node_meta, namespace, name, uid)
                if held:
                    self._remove_annotation(namespace, name, uid)
                    return BindResult(False, held, busy=True)
                locked = True
            body = client.V1Binding(
                metadata=client.V1ObjectMeta(name=name, namespace=namespace, uid=uid),
                target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
            )
            # The server answers a Status, not a Binding: do not let the client decode it.
            self.core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
            return BindResult(True)
        except ApiException as exc:
            reason = f"binding {namespace}/{name} to {node} failed: {api_reason(exc)}"
            log.warning(reason)
            if locked:
                self.release_lock(node, uid)
            if annotated:
                self._remove_annotation(namespace, name, uid)
            return BindResult(False, reason, retry=exc.status != 404)

    def _annotate(
        self, namespace: str, name: str, uid: str, assignment: GPUAssignment, has_annotations: bool | None
    ) -> None:
        value = assignment.to_annotation()
        test_uid = {"op": "test", "path": "/metadata/uid", "value": uid}
        into_map = {"op": "add", "path": f"/metadata/annotations/{_pointer(GPU_ASSIGNMENT)}", "value": value}
        if has_annotations:
            try:
                self.core.patch_namespaced_pod(name, namespace, [test_uid, into_map], _preload_content=False)
                return
            except ApiException as exc:
                if exc.status != 422:
                    raise
                # the uid test failed, or the map is gone after all: look at the pod
        meta = _json(self.core.read_namespaced_pod(name, namespace, _preload_content=False))["metadata"]
        if meta.get("uid") != uid:
            raise ApiException(status=409, reason=f"pod {namespace}/{name} was replaced (uid changed)")
        whole_map = {"op": "add", "path": "/metadata/annotations", "value": {GPU_ASSIGNMENT: value}}
        ops = [test_uid, into_map if meta.get("annotations") else whole_map]
        self.core.patch_namespaced_pod(name, namespace, ops, _preload_content=False)

    def _remove_annotation(self, namespace: str, name: str, uid: str) -> None:
        ops = [
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "remove", "path": f"/metadata/annotations/{_pointer(GPU_ASSIGNMENT)}"},
        ]
        try:
            self.core.patch_namespaced_pod(name, namespace, ops, _preload_content=False)
        except ApiException as exc:
            if exc.status not in (404, 422):  # gone, or the annotation/uid is not ours any more
                log.warning(
                    "could not roll back %s on %s/%s: %s", GPU_ASSIGNMENT, namespace, name, api_reason(exc)
                )

    # ---- the node lock -----------------------------------------------------------------------------------
    def _node_meta(self, node: str) -> dict[str, Any]:
        meta = _json(self.core.read_node(node, _preload_content=False))["metadata"]
        assert isinstance(meta, dict)
        return meta

    def _busy(self, meta: dict[str, Any], node: str, uid: str) -> str | None:
        raw = (meta.get("annotations") or {}).get(BIND_LOCK)
        busy = self._lock_busy(raw, uid, node) if raw else None
        return f"node {node} is busy: {busy}" if busy else None

    def _take_lock(self, node: str, meta: dict[str, Any], namespace: str, name: str, uid: str) -> str | None:
        """Take the node's bind lock, guarded by the resourceVersion read in `meta` (re-read once if the node
        changed since); return why not when another pod legitimately holds it."""
        lock = BindLock.for_pod(namespace, name, uid, since=self.clock()).to_annotation()
        for attempt in range(2):
            if attempt:
                meta = self._node_meta(node)
                busy = self._busy(meta, node, uid)
                if busy:
                    return busy
            guard = {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}
            add: dict[str, Any]
            if meta.get("annotations"):
                add = {"op": "add", "path": f"/metadata/annotations/{_pointer(BIND_LOCK)}", "value": lock}
            else:
                add = {"op": "add", "path": "/metadata/annotations", "value": {BIND_LOCK: lock}}
            try:
                self.core.patch_node(node, [guard, add], _preload_content=False)
                return None
            except ApiException as exc:
                if exc.status not in (409, 422):
                    raise
        return f"node {node} changed while taking its bind lock; retrying"

    def _lock_busy(self, raw: str, uid: str, node: str) -> str | None:
        try:
            lock = BindLock.from_annotation(raw)
        except ValueError as exc:
            log.warning("%s; taking the lock over", exc)
            return None
        if lock.uid == uid:
            return None  # ours from an earlier attempt (e.g. before a restart)
        age = lock.age_seconds(self.clock())
        if age >= self.lock_timeout_s:
            log.warning(
                "bind lock for %s/%s is stale (%.0fs); taking it over", lock.namespace, lock.name, age
            )
            return None
        try:
            holder = _json(self.core.read_namespaced_pod(lock.name, lock.namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        meta = holder["metadata"]
        done = (
            meta.get("uid") != lock.uid
            # never bound there (a scheduler died before binding it): no Allocate can be coming for it
            or (holder.get("spec") or {}).get("nodeName") != node
            or allocation_confirmed(holder)  # a gpu-allocated mark alone may be the pod user's own
            or meta.get("deletionTimestamp")
            or (holder.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")
        )
        if done:
            return None
        # No age in the text: the same wait gives the same message, so pod conditions are not rewritten.
        return f"waiting for the device plugin to allocate {lock.namespace}/{lock.name}"

    def release_lock(self, node: str, uid: str, attempts: int = 5) -> bool:
        """Remove the node's bind lock if `uid` holds it. Returns whether it was released.

        The removal is guarded by the resourceVersion just read, and a busy node changes all the time (its
        kubelet's status, the node controller's taints), so a lost race re-reads and tries again rather than
        leaving the node locked until the lock times out."""
        for _ in range(attempts):
            try:
                meta = _json(self.core.read_node(node, _preload_content=False))["metadata"]
                raw = (meta.get("annotations") or {}).get(BIND_LOCK)
                if not raw or BindLock.from_annotation(raw).uid != uid:
                    return False
                ops = [
                    {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
                    {"op": "remove", "path": f"/metadata/annotations/{_pointer(BIND_LOCK)}"},
                ]
                self.core.patch_node(node, ops, _preload_content=False)
                return True
            except ApiException as exc:
                if exc.status in (409, 422):
                    continue  # the node changed between our read and our patch
                log.warning("could not release the bind lock on %s: %s", node, exc)
                return False
            except ValueError as exc:
                log.warning("could not release the bind lock on %s: %s", node, exc)
                return False
        log.warning("could not release the bind lock on %s: it kept changing (%d tries)", node, attempts)
        return False


def _json(resp: Any) -> dict[str, Any]:
    data = json.loads(resp.data)
    assert isinstance(data, dict)
    return data
