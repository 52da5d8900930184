"""An in-process fake kubelet: the `Registration` service on `kubelet.sock` in a temp plugin dir, and
(`PodResourcesFake`) the PodResources API on a socket of its own.

It records every RegisterRequest and, as the real kubelet does, talks to the plugin over its socket. It
stays for what a real kubelet cannot be made to do on demand: refuse a registration, vanish and come back,
and list devices as held by a pod they were not answered for. Admission itself runs on real kubelets
(tests/sandbox/test_handoff.py).
"""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from device_plugin.v1beta1 import api_pb2, api_pb2_grpc
from scheduler.sandbox.podresources import PodResourcesServer


class FakeKubelet(api_pb2_grpc.RegistrationServicer):
    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self.requests: list[api_pb2.RegisterRequest] = []
        self._changed = threading.Condition()
        self._server: grpc.Server | None = None
        self._channels: list[grpc.Channel] = []
        self.refuse = 0  # refuse this many Register calls (recorded all the same), as a kubelet can

    @property
    def socket_path(self) -> Path:
        return self.plugin_dir / "kubelet.sock"

    def start(self) -> FakeKubelet:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        """Stop serving and delete the socket, as a kubelet that goes down."""
        if self._server is not None:
            self._server.stop(0).wait(5)
            self._server = None
        self.socket_path.unlink(missing_ok=True)
        for channel in self._channels:
            channel.close()
        self._channels.clear()

    def Register(self, request: api_pb2.RegisterRequest, context: grpc.ServicerContext) -> api_pb2.Empty:
        with self._changed:
            self.requests.append(request)
            self._changed.notify_all()
            refused = self.refuse > 0
            self.refuse -= refused
        if refused:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"resource {request.resource_name} refused")
        return api_pb2.Empty()

    def wait_for_registrations(self, count: int, timeout_s: float = 10.0) -> list[api_pb2.RegisterRequest]:
        with self._changed:
            ok = self._changed.wait_for(lambda: len(self.requests) >= count, timeout=timeout_s)
            assert ok, f"expected {count} registrations, got {len(self.requests)}"
            return list(self.requests)

    def plugin(self, endpoint: str) -> api_pb2_grpc.DevicePluginStub:
        """A client of the plugin's socket `endpoint` (the name it registered with)."""
        channel = grpc.insecure_channel(f"unix://{self.plugin_dir / endpoint}")
        self._channels.append(channel)
        grpc.channel_ready_future(channel).result(timeout=5)
        return api_pb2_grpc.DevicePluginStub(channel)


class PodResourcesFake:
    """The kubelet's PodResources API answering what the test says: `held[(namespace, name)]` is each
    listed container's devices, per resource. Served by the kubelet stand-in's server
    (scheduler/sandbox/podresources.py), fed from this table instead of admitted pods."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.held: dict[tuple[str, str], dict[str, dict[str, list[str]]]] = {}
        self._server = PodResourcesServer(socket, self._pods)

    def _pods(self) -> list[tuple[dict[str, Any], dict[str, dict[str, list[str]]]]]:
        return [
            ({"metadata": {"namespace": ns, "name": name}, "spec": {"containers": [{"name": c} for c in held]}},
             held)
            for (ns, name), held in list(self.held.items())
        ]  # fmt: skip

    def start(self) -> PodResourcesFake:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()
