"""Binding a pod to its node in as few requests as the API allows.

- The decision travels with the bind: the Binding subresource copies its `metadata.annotations` onto the
  pod in the same write that sets `spec.nodeName` (the API server checks the pod's uid, given in the
  Binding's metadata, and that the pod has no node yet). A pod that needs no bind lock is bound in one
  request, its `tessera.dev/gpu-assignment` with it.
- A pod the device plugin must recognise (a GPU pod on a node served by Tessera's device plugin: DESIGN.md,
  hand-off step 3) first takes the node's bind lock (`tessera.dev/bind-lock`): a JSON patch guarded by the
  node's resourceVersion as the watch cache shows it; only when the node changed since is it read again
  (and the lock looked at: a lock whose pod was allocated, is gone, or is older than `lock_timeout_s` is
  free to take). Then the Binding: two requests. The kubelet sees the pod only once it is bound, and then
  the lock names it and the assignment is on it.
On failure the lock, if taken, is released; nothing else was written.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.api.assignment import GPUAssignment
from scheduler.api.bind_lock import BindLock, allocation_confirmed
from scheduler.api.keys import BIND_LOCK, GPU_ASSIGNMENT
from scheduler.api.meta import json_pointer
from scheduler.kube import raw

log = logging.getLogger(__name__)

LOCK_ATTEMPTS = 3  # the cached node, then up to two fresh reads

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class BindResult:
    ok: bool
    reason: str = ""
    retry: bool = True  # worth trying again in a later cycle
    busy: bool = False  # the node's bind lock is held by another pod: wait for it, nothing is wrong


def api_reason(exc: ApiException) -> str:
    """The server's one-line message out of an ApiException."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return f"{exc.status} {exc.reason}"


def finish(resp: Any) -> None:
    """Read an answer requested with `_preload_content=False` to its end: only then does its connection go
    back to the client's pool (an unread one stays checked out, and the next request opens a new TLS
    connection, which costs both ends far more than the request)."""
    resp.drain_conn()
    resp.release_conn()


def binding_body(
    namespace: str, name: str, uid: str, node: str, assignment: GPUAssignment | None
) -> dict[str, Any]:
    """The Binding: the pod's uid as a precondition, the assignment as an annotation the server copies."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    if assignment is not None:
        meta["annotations"] = {GPU_ASSIGNMENT: assignment.to_annotation()}
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}  # fmt: skip


class Binder:
    def __init__(
        self,
        core: client.CoreV1Api,
        *,
        lock_timeout_s: float = 60.0,
        clock: Clock = lambda: datetime.now(UTC),
    ) -> None:
        self.core = core
        self.api = core.api_client  # requests go out raw (see raw.py): binds are the hot path
        self.lock_timeout_s = lock_timeout_s
        self.clock = clock

    def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        assignment: GPUAssignment | None,
        *,
        lock: bool = False,
        node_meta: Mapping[str, Any] | None = None,
    ) -> BindResult:
        """Bind, taking the node's bind lock first when `lock`. `node_meta`: the node's metadata as the watch
        cache has it (saves reading the node; a stale one costs one read more)."""
        locked = False
        try:
            if lock:
                held = self._take_lock(node, node_meta, namespace, name, uid)
                if held:
                    return BindResult(False, held, busy=True)
                locked = True
            body = binding_body(namespace, name, uid, node, assignment)
            raw.request(self.api, "POST", raw.pod_path(namespace, name, "binding"), body)
            return BindResult(True)
        except ApiException as exc:
            reason = f"binding {namespace}/{name} to {node} failed: {api_reason(exc)}"
            log.warning(reason)
            if locked:
                self.release_lock(node, uid)
            return BindResult(False, reason, retry=exc.status != 404)

    # ---- the node lock -----------------------------------------------------------------------------------
    def _node_meta(self, node: str) -> dict[str, Any]:
        meta = raw.request(self.api, "GET", raw.node_path(node))["metadata"]
        assert isinstance(meta, dict)
        return meta

    def _busy(self, meta: Mapping[str, Any], node: str, uid: str) -> str | None:
        held = (meta.get("annotations") or {}).get(BIND_LOCK)
        busy = self._lock_busy(held, uid, node) if held else None
        return f"node {node} is busy: {busy}" if busy else None

    def _take_lock(
        self, node: str, meta: Mapping[str, Any] | None, namespace: str, name: str, uid: str
    ) -> str | None:
        """Take the node's bind lock, guarded by the resourceVersion of `meta` (read again once if the node
        changed since, or when no `meta` was given); return why not when another pod legitimately holds it.
        Up to LOCK_ATTEMPTS tries: the node controller and kubelets write nodes too (taints, conditions), and
        one such write between the read and the patch should not cost the pod a whole cycle."""
        lock = BindLock.for_pod(namespace, name, uid, since=self.clock()).to_annotation()
        for attempt in range(LOCK_ATTEMPTS):
            if meta is None or attempt:
                meta = self._node_meta(node)
            busy = self._busy(meta, node, uid)
            if busy:
                return busy
            guard = {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}
            add: dict[str, Any]
            if meta.get("annotations"):
                add = {"op": "add", "path": f"/metadata/annotations/{json_pointer(BIND_LOCK)}", "value": lock}
            else:
                add = {"op": "add", "path": "/metadata/annotations", "value": {BIND_LOCK: lock}}
            try:
                raw.request(self.api, "PATCH", raw.node_path(node), [guard, add], content_type=raw.JSON_PATCH)
                return None
            except ApiException as exc:
                if exc.status not in (409, 422):
                    raise
        return f"node {node} changed while taking its bind lock; retrying"

    def _lock_busy(self, annotation: str, uid: str, node: str) -> str | None:
        try:
            lock = BindLock.from_annotation(annotation)
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
            holder = raw.request(self.api, "GET", raw.pod_path(lock.namespace, lock.name))
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
                meta = self._node_meta(node)
                held = (meta.get("annotations") or {}).get(BIND_LOCK)
                if not held or BindLock.from_annotation(held).uid != uid:
                    return False
                ops = [
                    {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
                    {"op": "remove", "path": f"/metadata/annotations/{json_pointer(BIND_LOCK)}"},
                ]
                raw.request(self.api, "PATCH", raw.node_path(node), ops, content_type=raw.JSON_PATCH)
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
