"""The plugin's lifecycle: serve every endpoint, register, re-register after a kubelet restart or a lost
socket, keep health current, and shut down cleanly removing our sockets."""

from __future__ import annotations

import logging
import threading
import time

import grpc

from device_plugin.allocator import Allocator
from device_plugin.cluster import KubePodCluster
from device_plugin.config import PluginConfig
from device_plugin.confirm import Confirmations
from device_plugin.endpoint import PluginEndpoint, socket_identity
from device_plugin.health import HealthMonitor
from device_plugin.inventory import Inventory
from device_plugin.kubelet_pods import KubeletPods
from device_plugin.resources import Resource
from device_plugin.service import DevicePluginService
from device_plugin.watch import PodWatch
from node_agent.nvml.facade import NVMLBackend

log = logging.getLogger(__name__)
MAX_RETRY_S = 30.0


def resources_for(config: PluginConfig) -> list[Resource]:
    out = [Resource(config.slice_resource, "slice", config.slices_per_gpu)]
    if config.whole_gpu_resource:
        out.append(Resource(config.whole_gpu_resource, "whole"))
    return out


class DevicePluginManager:
    def __init__(self, config: PluginConfig, backend: NVMLBackend, cluster: KubePodCluster | None) -> None:
        self.config = config
        self._backend = backend
        self.inventory = Inventory(backend.devices())
        # This node's pods (Allocate finds the pod there), the kubelet's PodResources API (which pod it admits,
        # which pod holds a container's devices) and the marks written once a pod is confirmed.
        self.pods: PodWatch | None = cluster.watch_node(config.node_name) if cluster is not None else None
        socket = config.pod_resources_socket
        self.kubelet_pods = KubeletPods(socket) if socket is not None else None
        self.confirmations = (
            Confirmations(cluster, self.kubelet_pods, self.pods)
            if cluster is not None and self.pods is not None
            else None
        )
        self.allocator = Allocator(
            config.node_name,
            self.inventory,
            self.pods,
            kubelet=self.kubelet_pods,
            confirmations=self.confirmations,
            pod_wait_s=config.pod_wait_s,
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
        self._kubelet: tuple[int, int] | None = None  # identity of the kubelet socket we registered with
        self._pending: set[str] = set()  # resources not registered with that kubelet yet
        # A refused registration is retried with a growing pause, not on every tick.
        self._failures = 0
        self._retry_at = 0.0
        self.registrations = 0  # successful Register calls

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
        if self.pods is not None:
            self.pods.start()
        if self.confirmations is not None:
            self.confirmations.start()
        try:
            for ep in self.endpoints:
                ep.serve()
            while not self._stopping.is_set():
                self._tick()
                self._stopping.wait(self.config.watch_interval_s)
        finally:
            self._shutdown()

    def _tick(self) -> None:
        for ep in self.endpoints:
            if not ep.socket_intact():
                log.warning("resource=%s socket %s is gone; serving again", ep.resource.name, ep.socket_path)
                ep.serve()
                self._pending.add(ep.resource.name)
        kubelet = socket_identity(self.config.kubelet_socket)
        if kubelet is None:
            if self._kubelet is not None:
                log.warning("kubelet socket %s disappeared; waiting for it", self.config.kubelet_socket)
            self._kubelet = None
            return
        if kubelet != self._kubelet:
            # A new kubelet (first start or restart) knows none of our endpoints.
            self._kubelet = kubelet
            self._pending = {ep.resource.name for ep in self.endpoints}
            self._failures, self._retry_at = 0, 0.0
        if not self._pending or time.monotonic() < self._retry_at:
            return
        for ep in self.endpoints:
            if ep.resource.name not in self._pending:
                continue
            try:
                ep.register(self.config.kubelet_socket)
            except (grpc.RpcError, grpc.FutureTimeoutError) as exc:
                self._failures += 1
                pause = min(MAX_RETRY_S, self.config.watch_interval_s * 2**self._failures)
                self._retry_at = time.monotonic() + pause
                detail = exc.details() if isinstance(exc, grpc.RpcError) and hasattr(exc, "details") else ""
                log.error(
                    "resource=%s registration with the kubelet failed (retry in %.1fs): %s",
                    ep.resource.name,
                    pause,
                    detail or type(exc).__name__,
                )
                return
            self._pending.discard(ep.resource.name)
            self.registrations += 1
        self._failures = 0

    def _shutdown(self) -> None:
        log.info("shutting down: stopping servers and removing sockets")
        self.inventory.close()
        for ep in self.endpoints:
            ep.stop()
        self.health.stop()
        if self.confirmations is not None:
            self.confirmations.stop()
        if self.pods is not None:
            self.pods.stop()
        if self.kubelet_pods is not None:
            self.kubelet_pods.close()
        try:
            self._backend.close()
        except Exception as exc:
            log.error("closing NVML failed: %s", exc)
