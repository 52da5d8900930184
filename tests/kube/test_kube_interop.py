"""The whole hand-off with the real parts: the webhook's patch, the scheduler (cycle + Kubernetes adapter),
and the device plugin's Allocator on its Kubernetes client, all through the fake API server. Only the
kubelet is played here: it calls Allocate for each bound pod's slice and starts the pod."""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

from kubernetes import client

from device_plugin.allocator import AllocationError, Allocator
from device_plugin.cluster import KubePodCluster
from device_plugin.inventory import Inventory
from device_plugin.resources import Resource
from node_agent.agent import Agent
from node_agent.nvml.fake import FakeNVML
from node_agent.publisher import ReportPublisher
from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import BIND_LOCK, GPU_ALLOCATED, GPU_ASSIGNMENT
from scheduler.kube.runner import SchedulerRunner
from scheduler.webhook.admission import AdmissionConfig, admit
from tests.fakes.kubeapi import FakeKubeAPI
from tests.fakes.patches import json_patch
from tests.kube.helpers import node_body, pod_body, wait_for
from tests.kube.test_kube_e2e import runner_config

NVML = FakeNVML("2xH100-80GB", seed="gpu-1")  # the node's GPUs, as its agent and device plugin see them
UUIDS = [d.uuid for d in NVML.devices()]
SLICE = Resource("tessera.dev/gpu-slice", "slice", slices_per_gpu=10)


def admitted(body: dict[str, Any]) -> dict[str, Any]:
    """The pod as the API server stores it after the mutating webhook."""
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "r1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                          "resource": {"group": "", "version": "v1", "resource": "pods"},
                          "operation": "CREATE", "userInfo": {"username": "alice"}, "object": body}}  # fmt: skip
    answer = admit(review, AdmissionConfig())["response"]
    assert answer["allowed"], answer
    return dict(json_patch(body, json.loads(base64.b64decode(answer["patch"]))))


class Kubelet:
    def __init__(self, api: FakeKubeAPI, allocator: Allocator) -> None:
        self.api, self.allocator = api, allocator
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
        while not self._stop.wait(0.02):
            for pod in self.api.objects("pods"):
                name = pod["metadata"]["name"]
                if pod["spec"].get("nodeName") != "gpu-1" or name in self.envs:
                    continue
                slices = int(pod["spec"]["containers"][0]["resources"]["limits"]["tessera.dev/gpu-slice"])
                offered = [f"{UUIDS[i]}::{i}" for i in range(slices)]  # any free slices, as the kubelet does
                try:
                    (response,) = self.allocator.allocate(SLICE, [offered])
                except AllocationError:
                    continue  # not this pod's turn yet (the lock names another pod)
                self.envs[name] = dict(response.envs)
                self.api.set_pod_phase(name)


def test_webhook_scheduler_and_device_plugin_hand_off(kube_api: FakeKubeAPI) -> None:
    kube_api.seed(node_body("gpu-1", gpus=2))
    # The scheduler learns the GPUs' UUIDs from the node agent's GPUNodeReport, published by the agent.
    publisher = ReportPublisher(client.CustomObjectsApi(kube_api.client()))
    Agent("gpu-1", NVML, publisher=publisher).tick()
    assert publisher.writes == 1
    inventory = Inventory(NVML.devices())
    allocator = Allocator(
        "gpu-1", inventory, KubePodCluster(client.CoreV1Api(kube_api.client())), lock_wait_s=0.2
    )
    runner = SchedulerRunner(kube_api.client(), runner_config())
    core = client.CoreV1Api(kube_api.client())
    with Kubelet(kube_api, allocator) as kubelet:
        runner.start()
        try:
            for name, fraction in (("infer-a", "0.5"), ("infer-b", "0.25"), ("infer-c", "0.5")):
                body = admitted(pod_body(name, annotations={"gpu-fraction": fraction}))
                core.create_namespaced_pod("default", body, _preload_content=False)
            wait_for(lambda: len(kubelet.envs) == 3, timeout=15)
        finally:
            runner.stop()
    for name, fraction in (("infer-a", 0.5), ("infer-b", 0.25), ("infer-c", 0.5)):
        pod = kube_api.get("pods", name)
        assignment = GPUAssignment.from_annotation(pod["metadata"]["annotations"][GPU_ASSIGNMENT])
        (gpu,) = assignment.gpus
        assert GPU_ALLOCATED in pod["metadata"]["annotations"] and pod["status"]["phase"] == "Running"
        assert gpu.uuid in UUIDS and gpu.milli == round(fraction * 1000)
        envs = kubelet.envs[name]
        assert envs["NVIDIA_VISIBLE_DEVICES"] == gpu.uuid
        assert envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={gpu.memory_mib}M"
    assert BIND_LOCK not in (kube_api.get("nodes", "gpu-1")["metadata"].get("annotations") or {})
