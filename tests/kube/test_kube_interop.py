"""The whole hand-off with the real parts on the real API server: the API server calls our webhook (the
chart's configurations), the scheduler (cycle + Kubernetes adapter) binds as its ServiceAccount, and the
device plugin's Allocator, as the node's ServiceAccount, serves what a kubelet asks for each bound pod's
slice. Only the kubelet is played here: it calls Allocate and reports the pod Running."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from kubernetes import client

from device_plugin.allocator import AllocationError, Allocator
from device_plugin.cluster import KubePodCluster
from device_plugin.inventory import Inventory
from device_plugin.resources import Resource
from node_agent.agent import Agent
from node_agent.nvml.fake import FakeNVML
from node_agent.publisher import ReportPublisher
from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import BIND_LOCK, GPU_ALLOCATED, GPU_ASSIGNMENT, GPU_SLICE_RESOURCE
from scheduler.kube.queue_index import informer_queue_lookup
from scheduler.webhook.admission import AdmissionConfig
from tests.controlplane import webhooks
from tests.controlplane.scene import Scene, wait_until
from tests.kube.helpers import pod_body

pytestmark = pytest.mark.apiserver

NVML = FakeNVML("2xH100-80GB", seed="gpu-1")  # the node's GPUs, as its agent and device plugin see them
UUIDS = [d.uuid for d in NVML.devices()]
SLICE = Resource(GPU_SLICE_RESOURCE, "slice", slices_per_gpu=10)


class Kubelet:
    """Calls Allocate for each pod bound to gpu-1 (any free slices, as the kubelet offers them)."""

    def __init__(self, scene: Scene, allocator: Allocator) -> None:
        self.scene, self.allocator = scene, allocator
        self.envs: dict[str, dict[str, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for pod in self.scene.pods():
                name = pod["metadata"]["name"]
                if pod["spec"].get("nodeName") != "gpu-1" or name in self.envs:
                    continue
                slices = int(pod["spec"]["containers"][0]["resources"]["limits"][GPU_SLICE_RESOURCE])
                offered = [f"{UUIDS[i]}::{i}" for i in range(slices)]
                try:
                    (response,) = self.allocator.allocate(SLICE, [offered])
                except AllocationError:
                    continue  # not this pod's turn yet (the lock names another pod)
                self.envs[name] = dict(response.envs)
                status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
                self.scene.core.patch_namespaced_pod_status(name, self.scene.ns, {"status": status})


def test_webhook_scheduler_and_device_plugin_hand_off(scene: Scene, tmp_path: Path) -> None:
    scene.node("gpu-1", gpus=2)
    # The scheduler learns the GPUs' UUIDs from the GPUNodeReport the node agent publishes, as the node's
    # ServiceAccount (no hand-set annotation).
    publisher = ReportPublisher(client.CustomObjectsApi(scene.tessera.agent_client()))
    scene.track("gpunodereports", "gpu-1")
    Agent("gpu-1", NVML, publisher=publisher).tick()
    assert publisher.writes == 1
    scene.queue("default")  # as the chart installs it
    runner = scene.scheduler()
    config = AdmissionConfig(privileged_users=frozenset({scene.tessera.scheduler_user}),
                             queue_lookup=informer_queue_lookup(runner.cluster.informers["Queue"]))  # fmt: skip
    webhooks.register(scene, webhooks.start_server(scene, tmp_path / "certs", config).port)
    inventory = Inventory(NVML.devices())
    plugin = KubePodCluster(client.CoreV1Api(scene.tessera.device_plugin_client()))
    allocator = Allocator("gpu-1", inventory, plugin, lock_wait_s=0.2)
    with Kubelet(scene, allocator) as kubelet:
        for name, fraction in (("infer-a", "0.5"), ("infer-b", "0.25"), ("infer-c", "0.5")):
            scene.create_pod(pod_body(name, annotations={"gpu-fraction": fraction}))  # mutated by the webhook
        wait_until(lambda: len(kubelet.envs) == 3, timeout=20)
    for name, fraction in (("infer-a", 0.5), ("infer-b", 0.25), ("infer-c", 0.5)):
        pod = scene.pod(name)
        assignment = GPUAssignment.from_annotation(pod["metadata"]["annotations"][GPU_ASSIGNMENT])
        (gpu,) = assignment.gpus
        assert GPU_ALLOCATED in pod["metadata"]["annotations"] and pod["status"]["phase"] == "Running"
        assert gpu.uuid in UUIDS and gpu.milli == round(fraction * 1000)
        envs = kubelet.envs[name]
        assert envs["NVIDIA_VISIBLE_DEVICES"] == gpu.uuid
        assert envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={gpu.memory_mib}M"
    assert BIND_LOCK not in (scene.node_obj("gpu-1")["metadata"].get("annotations") or {})
