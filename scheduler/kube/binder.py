"""Binding a pod to its node in one request.

The decision travels with the bind: the Binding subresource copies its `metadata.annotations` onto the pod
in the same write that sets `spec.nodeName` (the API server checks the pod's uid, given in the Binding's
metadata, and that the pod has no node yet), so the kubelet, and the device plugin's watch, see the pod
bound and its `tessera.dev/gpu-assignment` at once. On failure nothing was written.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT
from scheduler.kube import raw

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BindResult:
    ok: bool
    reason: str = ""
    retry: bool = True  # worth trying again in a later cycle


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
    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core
        self.api = core.api_client  # requests go out raw (see raw.py): binds are the hot path

    def bind(
        self, namespace: str, name: str, uid: str, node: str, assignment: GPUAssignment | None
    ) -> BindResult:
        """Bind with one Binding request carrying the assignment."""
        try:
            body = binding_body(namespace, name, uid, node, assignment)
            raw.request(self.api, "POST", raw.pod_path(namespace, name, "binding"), body)
            return BindResult(True)
        except ApiException as exc:
            reason = f"binding {namespace}/{name} to {node} failed: {api_reason(exc)}"
            log.warning(reason)
            return BindResult(False, reason, retry=exc.status != 404)
