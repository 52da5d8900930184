"""The kubelet's PodResources API (v1), as the device plugin asks it: which devices each pod holds.

The kubelet serves it on `<kubelet root>/pod-resources/kubelet.sock` (`--pod-resources-socket`). `List`
gives its active pods: the ones it has admitted and the one it is admitting (that one holds none of the
devices it asks for yet, since the kubelet records a container's devices once `Allocate` has answered).
Each pod lists its app containers and its sidecars; other init containers are not listed, and the devices
the kubelet gave them show on the app containers that reuse them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from device_plugin.podresources import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)


class KubeletPodsError(RuntimeError):
    """The PodResources API could not be asked (no socket, the kubelet restarting); one line."""


@dataclass(frozen=True)
class HeldDevices:
    """One pod as the kubelet lists it: per listed container, per resource, the device IDs it holds."""

    namespace: str
    name: str
    containers: Mapping[str, Mapping[str, frozenset[str]]] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def devices(self, resource: str) -> frozenset[str]:
        """Every device of `resource` its listed containers hold."""
        out: set[str] = set()
        for by_resource in self.containers.values():
            out |= by_resource.get(resource, frozenset())
        return frozenset(out)

    def of(self, container: str, resource: str) -> frozenset[str] | None:
        """The devices of `resource` that `container` holds; None when the kubelet does not list it."""
        by_resource = self.containers.get(container)
        return None if by_resource is None else by_resource.get(resource, frozenset())


def _held(pod: api_pb2.PodResources) -> HeldDevices:
    containers: dict[str, dict[str, frozenset[str]]] = {}
    for c in pod.containers:
        by_resource: dict[str, set[str]] = {}
        for d in c.devices:
            by_resource.setdefault(d.resource_name, set()).update(d.device_ids)
        containers[c.name] = {k: frozenset(v) for k, v in by_resource.items()}
    return HeldDevices(pod.namespace, pod.name, containers)


class KubeletPods:
    def __init__(self, socket: Path, *, timeout_s: float = 2.0) -> None:
        self.socket = socket
        self._timeout = timeout_s
        self._channel: grpc.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None
        self._lock = threading.Lock()

    def _client(self) -> api_pb2_grpc.PodResourcesListerStub:
        with self._lock:
            if self._stub is None:
                if not self.socket.exists():
                    raise KubeletPodsError(f"no PodResources socket at {self.socket}")
                self._channel = grpc.insecure_channel(f"unix://{self.socket}")
                self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
            return self._stub

    def _reset(self) -> None:
        """Drop the channel: the kubelet restarts with a new socket."""
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel, self._stub = None, None

    def list(self) -> list[HeldDevices]:
        """The kubelet's active pods with what they hold. Raises KubeletPodsError."""
        try:
            resp = self._client().List(api_pb2.ListPodResourcesRequest(), timeout=self._timeout)
        except grpc.RpcError as exc:
            self._reset()
            raise KubeletPodsError(f"PodResources List failed: {_detail(exc)}") from None
        return [_held(p) for p in resp.pod_resources]

    def get(self, namespace: str, name: str) -> HeldDevices | None:
        """One pod as the kubelet knows it; None when it does not. Raises KubeletPodsError."""
        request = api_pb2.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
        try:
            resp = self._client().Get(request, timeout=self._timeout)
        except grpc.RpcError as exc:
            if "not found" in _detail(exc):
                return None
            self._reset()
            raise KubeletPodsError(f"PodResources Get failed: {_detail(exc)}") from None
        return _held(resp.pod_resources)

    def close(self) -> None:
        self._reset()


def _detail(exc: grpc.RpcError) -> str:
    details = exc.details() if hasattr(exc, "details") else None
    return (details or str(exc)).splitlines()[0]
