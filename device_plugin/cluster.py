"""What the plugin asks of the Kubernetes API, on the official client: a watch of this node's pods
(`watch.py`) and one write per pod, `tessera.dev/gpu-allocated` (a merge patch naming the pod's uid).

The chart's role gives it exactly that: `list` and `watch` pods (RBAC cannot say "this node"; the field
selector does, and the node-scope policy refuses its writes to pods bound elsewhere), `patch` pods.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from device_plugin.pods import PodView
from device_plugin.watch import PodWatch
from scheduler.api.allocation import GPUAllocation
from scheduler.api.keys import GPU_ALLOCATED

MERGE_PATCH = "application/merge-patch+json"


class ClusterError(RuntimeError):
    """The API server could not be asked or refused; the message is one line."""


class PodMarker(Protocol):
    def mark_allocated(self, pod: PodView, allocation: GPUAllocation) -> None:
        """Set `tessera.dev/gpu-allocated` on exactly this pod (same uid). Raises ClusterError."""
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
        self.api = api
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

    def watch_node(self, node: str) -> PodWatch:
        """A watch of the pods bound to `node` (not started)."""
        return PodWatch(self.api, node)

    def mark_allocated(self, pod: PodView, allocation: GPUAllocation) -> None:
        # A merge patch naming the uid: the API server refuses to change a uid (422), so a pod deleted and
        # created again under the same name is never marked by mistake.
        body = {"metadata": {"uid": pod.uid, "annotations": {GPU_ALLOCATED: allocation.to_annotation()}}}
        try:
            resp: Any = self.api.patch_namespaced_pod(
                pod.name,
                pod.namespace,
                body=body,
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
            resp.read()
            resp.release_conn()
        except ApiException as exc:
            if exc.status in (404, 409, 422):
                raise ClusterError(f"pod {pod.ref} was deleted or replaced") from None
            raise ClusterError(_one_line(exc)) from None
        except Exception as exc:  # urllib3 connection errors and the like
            raise ClusterError(f"API server unreachable: {exc}") from None
