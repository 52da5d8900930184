"""Fixtures for the device plugin tests: a short temp plugin dir, a fake kubelet, a running plugin."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from device_plugin.cluster import KubePodCluster
from device_plugin.config import PluginConfig
from device_plugin.manager import DevicePluginManager
from node_agent.nvml.fake import FakeNVML
from tests.device_plugin.fake_kubelet import FakeKubelet

NODE = "gpu-node-1"


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    # Unix socket paths are limited to ~107 bytes: keep the dir short rather than under pytest's tmp_path.
    path = Path(tempfile.mkdtemp(prefix="tdp-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(plugin_dir: Path) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(plugin_dir).start()
    try:
        yield fake
    finally:
        fake.stop()


@dataclass
class RunningPlugin:
    manager: DevicePluginManager
    nvml: FakeNVML
    thread: threading.Thread

    def stop(self) -> None:
        self.manager.request_stop()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "plugin did not stop"


StartPlugin = Callable[..., RunningPlugin]


@pytest.fixture
def start_plugin(plugin_dir: Path) -> Iterator[StartPlugin]:
    started: list[RunningPlugin] = []

    def start(
        cluster: KubePodCluster | None = None,
        *,
        gpus: str = "2xA100-80GB",
        slices_per_gpu: int = 4,
        pod_resources_socket: Path | None = None,
        **kw: object,
    ) -> RunningPlugin:
        config = PluginConfig(
            node_name=NODE,
            plugin_dir=plugin_dir,
            slices_per_gpu=slices_per_gpu,
            watch_interval_s=0.05,
            health_interval_s=0.2,
            pod_resources_socket=pod_resources_socket,
            **kw,  # type: ignore[arg-type]
        )
        nvml = FakeNVML(gpus, seed=NODE)
        manager = DevicePluginManager(config, nvml, cluster)
        thread = threading.Thread(target=manager.run, name="device-plugin", daemon=True)
        thread.start()
        running = RunningPlugin(manager, nvml, thread)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()
