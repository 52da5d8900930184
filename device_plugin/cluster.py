"""What the plugin needs from the Kubernetes API, and its implementation on the official client.

Five calls per allocation: read the node's bind lock, read the locked pod, list the node's pods (no other
pod may be waiting for the same resource), mark the pod allocated and release the lock. Reads skip the
client's model deserialisation (raw JSON) to keep Allocate fast.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from scheduler.api.keys import BIND_LOCK, GPU_ALLOCATED
from scheduler.api.meta import json_pointer

JSON_PATCH = "application/json-patch+json"


class ClusterError(RuntimeError):
    """The API server could not be asked or refused; the message is one line."""


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    uid: str
    node_name: str | None
    annotations: dict[str, str] = field(default_factory=dict)
    deleting: bool = False
    phase: str = "Pending"
    # Extended resources any of its containers (or init containers) requests or limits.
    resources: frozenset[str] = frozenset()
    # The kubelet has admitted it (it reports container statuses): it is past Allocate.
    started: bool = False

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def pod_view(obj: dict[str, Any]) -> PodView:
    """A pod as the API returns it (JSON) -> PodView."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    wanted = {
        str(name)
        for kind in ("containers", "initContainers")
        for c in spec.get(kind) or []
        for field_ in ("limits", "requests")
        for name in ((c.get("resources") or {}).get(field_) or {})
    }
    return PodView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        node_name=spec.get("nodeName"),
        annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        deleting=meta.get("deletionTimestamp") is not None,
        phase=str(status.get("phase") or "Pending"),
        resources=frozenset(wanted),
        started=bool(status.get("containerStatuses") or status.get("initContainerStatuses")),
    )


class PodCluster(Protocol):
    def read_bind_lock(self, node: str) -> str | None:
        """The raw `tessera.dev/bind-lock` value on the node, or None when no lock is held."""
        ...

    def read_pod(self, namespace: str, name: str) -> PodView | None:
        """The pod, or None when it does not exist."""
        ...

    def pods_on_node(self, node: str) -> list[PodView]:
        """Every pod bound to `node`."""
        ...

    def mark_allocated(self, pod: PodView, when: str) -> None:
        """Set `tessera.dev/gpu-allocated` on exactly this pod (same UID)."""
        ...

    def release_bind_lock(self, node: str, raw: str) -> bool:
        """Remove the node's lock only if it still has the value `raw`; False if it changed meanwhile."""
        ...


def _one_line(exc: ApiException) -> str:
    message = ""
    if exc.body:
        try:
            message = str(json.loads(exc.body).get("message", ""))
        except (ValueError, AttributeError):
            message = str(exc.body)
    return f"HTTP {exc.status}: {(message or exc.reason or 'error').splitlines()[0]}"


class KubePodCluster:
    def __init__(self, api: k8s.CoreV1Api, timeout_s: float = 5.0) -> None:
        self._api = api
        self._timeout = timeout_s

    @classmethod
    def connect(cls, url: str | None = None, kubeconfig: str | None = None) -> KubePodCluster:
        """An explicit URL (plain HTTP, no auth: tests), a kubeconfig, or the in-cluster service account."""
        if url:
            conf = k8s.Configuration(host=url)
        else:
            conf = k8s.Configuration()
            try:
                if kubeconfig:
                    k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=conf)
                else:
                    k8s_config.load_incluster_config(client_configuration=conf)
            except k8s_config.ConfigException as exc:
                raise ClusterError(f"no Kubernetes API configuration: {exc}") from None
        return cls(k8s.CoreV1Api(k8s.ApiClient(conf)))

    def _get_json(self, call: Any, *args: str) -> dict[str, Any] | None:
        try:
            resp = call(*args, _preload_content=False, _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise ClusterError(_one_line(exc)) from None
        except Exception as exc:  # urllib3 connection errors and the like
            raise ClusterError(f"API server unreachable: {exc}") from None
        try:
            data: dict[str, Any] = json.loads(resp.data)
        finally:
            # Raw responses are not handed back to the connection pool by themselves.
            resp.release_conn()
        return data

    def read_bind_lock(self, node: str) -> str | None:
        obj = self._get_json(self._api.read_node, node)
        if obj is None:
            raise ClusterError(f"node {node} does not exist in the API server")
        annotations = obj.get("metadata", {}).get("annotations") or {}
        value = annotations.get(BIND_LOCK)
        return None if value is None else str(value)

    def read_pod(self, namespace: str, name: str) -> PodView | None:
        obj = self._get_json(self._api.read_namespaced_pod, name, namespace)
        return None if obj is None else pod_view(obj)

    def pods_on_node(self, node: str) -> list[PodView]:
        listing = functools.partial(
            self._api.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}"
        )
        obj = self._get_json(listing)
        return [pod_view(item) for item in (obj or {}).get("items") or []]

    def _json_patch(self, call: Any, ops: list[dict[str, Any]], *args: str) -> bool:
        """Apply a JSON patch; False when a `test` op failed (the object changed), ClusterError otherwise."""
        try:
            resp = call(
                *args,
                body=ops,
                _content_type=JSON_PATCH,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
            resp.read()
            resp.release_conn()
        except ApiException as exc:
            # A failed `test` op answers 422 (UnprocessableEntity); a vanished object 404.
            if exc.status in (404, 409, 422):
                return False
            raise ClusterError(_one_line(exc)) from None
        except Exception as exc:
            raise ClusterError(f"API server unreachable: {exc}") from None
        return True

    def mark_allocated(self, pod: PodView, when: str) -> None:
        ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": pod.uid}]
        if pod.annotations:
            ops.append(
                {"op": "add", "path": f"/metadata/annotations/{json_pointer(GPU_ALLOCATED)}", "value": when}
            )
        else:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": {GPU_ALLOCATED: when}})
        if not self._json_patch(self._api.patch_namespaced_pod, ops, pod.name, pod.namespace):
            raise ClusterError(f"pod {pod.namespace}/{pod.name} was deleted or replaced while allocating")

    def release_bind_lock(self, node: str, raw: str) -> bool:
        path = f"/metadata/annotations/{json_pointer(BIND_LOCK)}"
        ops = [{"op": "test", "path": path, "value": raw}, {"op": "remove", "path": path}]
        return self._json_patch(self._api.patch_node, ops, node)
