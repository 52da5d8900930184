"""The kubelet stand-in's device manager against the real device plugin, over the real gRPC sockets (no API
server needed): registration, capacity from ListAndWatch, and Allocate failures worded as the kubelet
words them. Also its resource admission and the sandbox's use of the chart's manifests."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from device_plugin.config import PluginConfig
from device_plugin.manager import DevicePluginManager
from node_agent.nvml.fake import FakeNVML
from scheduler.sandbox import components, manifests
from scheduler.sandbox.admission import AdmissionError, check_fit
from scheduler.sandbox.devices import DeviceManager
from tests.sandbox.env import pod, wait_for


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))  # Unix socket paths must stay short
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def node(plugin_dir: Path) -> Iterator[tuple[DeviceManager, DevicePluginManager]]:
    changes = threading.Event()
    devices = DeviceManager(plugin_dir, changes.set).start()
    config = PluginConfig(
        node_name="n1", plugin_dir=plugin_dir, watch_interval_s=0.1, pod_resources_socket=None
    )
    plugin = DevicePluginManager(config, FakeNVML("2xA100-40GB", seed="n1"), cluster=None)
    thread = threading.Thread(target=plugin.run, daemon=True)
    thread.start()
    try:
        yield devices, plugin
    finally:
        plugin.request_stop()
        thread.join(timeout=10)
        devices.stop()


def test_capacity_comes_from_the_plugins_list_and_watch(
    node: tuple[DeviceManager, DevicePluginManager],
) -> None:
    devices, _ = node
    want = {"tessera.dev/gpu-slice": (2000, 2000), "nvidia.com/gpu": (2, 2)}
    wait_for("both resources registered and listed", lambda: devices.resources() == want, 10)
    assert sorted(devices.registrations) == ["nvidia.com/gpu", "tessera.dev/gpu-slice"]


def test_a_refused_allocate_is_the_pods_admission_error_and_frees_its_devices(
    node: tuple[DeviceManager, DevicePluginManager],
) -> None:
    devices, _ = node
    wait_for("GPUs listed", lambda: devices.resources().get("nvidia.com/gpu") == (2, 2), 10)
    with pytest.raises(AdmissionError) as refused:
        devices.allocate("uid-1", "main", "nvidia.com/gpu", 1)  # a plugin without API access refuses
    assert refused.value.reason == "UnexpectedAdmissionError"
    message = str(refused.value)
    assert message.startswith("Allocate failed due to rpc error: code = FailedPrecondition desc = tessera: ")
    assert message.endswith(", which is unexpected")
    assert devices.devices_of("uid-1") == {}  # nothing stays reserved for a refused pod
    with pytest.raises(AdmissionError, match=r"Requested: 3, Available: 2"):
        devices.allocate("uid-2", "main", "nvidia.com/gpu", 3)


def test_resources_must_fit_next_to_the_admitted_pods() -> None:
    allocatable = {"cpu": "1", "memory": "1Gi", "pods": "110", "nvidia.com/gpu": "2"}
    first = pod("a")
    first["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "800m"
    second = pod("b")
    second["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "300m"
    check_fit(first, [], allocatable, device_resources={"nvidia.com/gpu"})
    with pytest.raises(AdmissionError) as refused:
        check_fit(second, [first], allocatable, device_resources={"nvidia.com/gpu"})
    assert refused.value.reason == "OutOfcpu"
    assert (
        str(refused.value)
        == "Node didn't have enough resource: cpu, requested: 300, used: 800, capacity: 1000"
    )


def test_webhooks_call_the_local_server_with_the_sandbox_ca() -> None:
    now, webhooks = manifests.for_sandbox(manifests.chart_objects())
    kinds = {d["kind"] for d in now}
    assert "CustomResourceDefinition" not in kinds and {"ClusterRole", "PriorityClass", "Queue"} <= kinds
    assert not kinds & {"Deployment", "DaemonSet", "Service", "Issuer", "Certificate"}
    rewritten = manifests.local_webhooks(webhooks, "https://127.0.0.1:9443", b"PEM")
    assert {d["kind"] for d in rewritten} == manifests.WEBHOOK_KINDS
    for doc, original in zip(rewritten, webhooks, strict=True):
        assert manifests.CERT_MANAGER_ANNOTATION not in (doc["metadata"].get("annotations") or {})
        for hook, before in zip(doc["webhooks"], original["webhooks"], strict=True):
            path = before["clientConfig"]["service"]["path"]
            assert hook["clientConfig"] == {"url": f"https://127.0.0.1:9443{path}", "caBundle": "UEVN"}
            assert hook["rules"] == before["rules"] and hook.get("matchConditions") == before.get(
                "matchConditions"
            )


def test_components_run_the_charts_command_lines() -> None:
    node_pod = components.pod_template(*components.AGENT)
    assert node_pod.service_account == "tessera-agent"
    assert components.pod_template(*components.DEVICE_PLUGIN).service_account == "tessera-device-plugin"
    argv = components.command_line(
        node_pod.containers["tessera-agent"],
        env={"NODE_NAME": "gpu-node-1"},
        overrides={"--listen": "127.0.0.1:1234", "--proc-root": "/proc"},
        extra=["--fake-gpus=2xA100-40GB"],
    )
    assert "--node-name=gpu-node-1" in argv and "--listen=127.0.0.1:1234" in argv
    assert "--proc-root=/proc" in argv and argv[-1] == "--fake-gpus=2xA100-40GB"
    chart_args = node_pod.containers["tessera-agent"]["args"]
    assert len(argv) == len(components.executable("tessera-agent")) + len(chart_args) + 1
