"""The plugin's lifecycle: serve every endpoint, register, re-register after a kubelet restart or a lost
socket, keep health current, and shut down cleanly removing our sockets."""

from __future__ import annotations

import logging
import threading

import grpc

from device_plugin.allocator import Allocator
from device_plugin.cluster import PodCluster
from device_plugin.config import PluginConfig
from device_plugin.endpoint import PluginEndpoint, socket_identity
from device_plugin.health import HealthMonitor
from device_plugin.inventory import Inventory
from device_plugin.resources import Resource
from device_plugin.service import DevicePluginService
from node_agent.nvml.facade import NVMLBackend

log = logging.getLogger(__name__)


def resources_for(config: PluginConfig) -> list[Resource]:
    out = [Resource(config.slice_resource, "slice", config.slices_per_gpu)]
    if config.whole_gpu_resource:
        out.append(Resource(config.whole_gpu_resource, "whole"))
    return out


class DevicePluginManager:
    def __init__(self, config: PluginConfig, backend: NVMLBackend, cluster: PodCluster | None) -> None:
        self.config = config
        self._backend = backend
        self.inventory = Inventory(backend.devices())
        self.allocator = Allocator(
            config.node_name,
            self.inventory,
            cluster,
            lock_wait_s=config.lock_wait_s,
            mps_pipe_dir=config.mps_pipe_dir,
        )
        self.health = HealthMonitor(backend, self.inventory, sample_interval_s=config.health_interval_s)
        self._stopping = threading.Event()
        self.endpoints = [
            PluginEndpoint(
                config.plugin_dir, r, DevicePluginService(r, self.inventory, self.allocator, self._stopping)
            )
            for r in resources_for(config)
        ]
        self._registered_with: tuple[int, int] | None = None
        self.registrations = 0  # successful Register rounds, for logs and tests
        self._done = threading.Event()

    def request_stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        """Serve until `request_stop()`; then stop every server and remove our sockets."""
        self.config.plugin_dir.mkdir(parents=True, exist_ok=True)
        gpus = self.inventory.gpus()
        log.info(
            "node=%s gpus=%s", self.config.node_name, ",".join(f"{g.index}:{g.uuid}" for g in gpus) or "none"
        )
        self.health.sample_all()
        self.health.start()
        try:
            for ep in self.endpoints:
                ep.serve()
            while not self._stopping.is_set():
                self._tick()
                self._stopping.wait(self.config.watch_interval_s)
        finally:
            self._shutdown()

    def wait_stopped(self, timeout_s: float) -> bool:
        return self._done.wait(timeout_s)

    def _tick(self) -> None:
        lost = [ep for ep in self.endpoints if not ep.socket_intact()]
        for ep in lost:
            log.warning("resource=%s socket %s is gone; serving again", ep.resource.name, ep.socket_path)
            ep.serve()
        kubelet = socket_identity(self.config.kubelet_socket)
        if kubelet is None:
            if self._registered_with is not None:
                log.warning(
                    "kubelet socket %s disappeared; waiting for the kubelet", self.config.kubelet_socket
                )
            self._registered_with = None
            return
        if kubelet == self._registered_with and not lost:
            return
        try:
            for ep in self.endpoints:
                ep.register(self.config.kubelet_socket)
        except (grpc.RpcError, grpc.FutureTimeoutError) as exc:
            detail = exc.details() if isinstance(exc, grpc.RpcError) and hasattr(exc, "details") else exc
            log.error("registration with the kubelet failed (will retry): %s", detail or type(exc).__name__)
            return
        self._registered_with = kubelet
        self.registrations += 1

    def _shutdown(self) -> None:
        log.info("shutting down: stopping servers and removing sockets")
        self.inventory.close()
        for ep in self.endpoints:
            ep.stop()
        self.health.stop()
        try:
            self._backend.close()
        except Exception as exc:
            log.error("closing NVML failed: %s", exc)
        self._done.set()
