"""One resource's gRPC server on its Unix socket, and its registration with the kubelet."""

from __future__ import annotations

import logging
import os
from concurrent import futures
from pathlib import Path

import grpc

from device_plugin.config import API_VERSION
from device_plugin.resources import Resource
from device_plugin.service import DevicePluginService
from device_plugin.v1beta1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)
REGISTER_TIMEOUT_S = 5.0
# ListAndWatch holds a worker for as long as the kubelet watches; the rest serve Allocate and friends.
WORKERS = 8


def socket_identity(path: Path) -> tuple[int, int] | None:
    """(inode, ctime ns) of a socket file, None when absent: a re-created socket has a new identity."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_ctime_ns


class PluginEndpoint:
    def __init__(self, plugin_dir: Path, resource: Resource, service: DevicePluginService) -> None:
        self.resource = resource
        self.socket_path = plugin_dir / resource.endpoint
        self._service = service
        self._server: grpc.Server | None = None
        self._identity: tuple[int, int] | None = None

    @property
    def serving(self) -> bool:
        return self._server is not None

    def socket_intact(self) -> bool:
        """False when our socket file was deleted or replaced (the kubelet wipes the dir on restart)."""
        return self._identity is not None and socket_identity(self.socket_path) == self._identity

    def serve(self) -> None:
        self.stop()
        self.socket_path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="dp"))
        api_pb2_grpc.add_DevicePluginServicer_to_server(self._service, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        self._identity = socket_identity(self.socket_path)
        log.info("resource=%s serving on %s", self.resource.name, self.socket_path)

    def register(self, kubelet_socket: Path) -> None:
        """Register with the kubelet; raises grpc.RpcError or grpc.FutureTimeoutError on failure."""
        request = api_pb2.RegisterRequest(
            version=API_VERSION,
            endpoint=self.socket_path.name,
            resource_name=self.resource.name,
            options=self._service.options(),
        )
        with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
            grpc.channel_ready_future(channel).result(timeout=REGISTER_TIMEOUT_S)
            api_pb2_grpc.RegistrationStub(channel).Register(request, timeout=REGISTER_TIMEOUT_S)
        log.info("resource=%s registered with the kubelet at %s", self.resource.name, kubelet_socket)

    def stop(self, grace_s: float = 1.0) -> None:
        if self._server is None:
            return
        self._server.stop(grace_s).wait(grace_s + 1)
        self._server = None
        # Only remove the socket if it is still ours (the kubelet may have wiped and re-used the dir).
        if self._identity is not None and socket_identity(self.socket_path) == self._identity:
            self.socket_path.unlink(missing_ok=True)
        self._identity = None
