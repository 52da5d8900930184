"""The kubelet stand-in's PodResources API (v1, `List` and `Get`), on `<state dir>/pod-resources/kubelet.sock`,
as a kubelet serves it: its active pods (admitted, or being admitted) with the devices each container holds;
app containers and sidecars listed, other init containers not (their devices show on the app containers
that reuse them, as with a real kubelet; the stand-in gives each container its own, so they do not)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from device_plugin.podresources import api_pb2, api_pb2_grpc

Obj = dict[str, Any]
# Each active pod, and per container the devices it holds by resource.
Source = Callable[[], list[tuple[Obj, dict[str, dict[str, list[str]]]]]]


def _listed(pod: Obj) -> list[str]:
    """The containers a kubelet lists: sidecars (restartable init containers), then app containers."""
    spec = pod.get("spec") or {}
    sidecars = [c["name"] for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    return [*sidecars, *(c["name"] for c in spec.get("containers") or [])]


def _resources(pod: Obj, held: dict[str, dict[str, list[str]]]) -> api_pb2.PodResources:
    meta = pod.get("metadata") or {}
    containers = [
        api_pb2.ContainerResources(
            name=name,
            devices=[
                api_pb2.ContainerDevices(resource_name=r, device_ids=ids)
                for r, ids in sorted(held.get(name, {}).items())
            ],
        )
        for name in _listed(pod)
    ]
    return api_pb2.PodResources(
        name=meta.get("name", ""), namespace=meta.get("namespace", ""), containers=containers
    )


class PodResourcesServer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, socket: Path, source: Source) -> None:
        self.socket = socket
        self._source = source
        self._server: grpc.Server | None = None

    def start(self) -> PodResourcesServer:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="podresources"))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0).wait(5)
            self._server = None
        self.socket.unlink(missing_ok=True)

    def List(
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.ListPodResourcesResponse:
        return api_pb2.ListPodResourcesResponse(
            pod_resources=[_resources(pod, held) for pod, held in self._source()]
        )

    def Get(
        self, request: api_pb2.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.GetPodResourcesResponse:
        for pod, held in self._source():
            meta = pod.get("metadata") or {}
            if (meta.get("namespace"), meta.get("name")) == (request.pod_namespace, request.pod_name):
                return api_pb2.GetPodResourcesResponse(pod_resources=_resources(pod, held))
        context.abort(
            grpc.StatusCode.UNKNOWN, f"pod {request.pod_name} in namespace {request.pod_namespace} not found"
        )
        raise AssertionError("unreachable")  # abort raises
