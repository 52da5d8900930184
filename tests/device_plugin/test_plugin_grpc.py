"""The plugin through its real gRPC socket, the messages a kubelet sees compared whole: Registration,
GetDevicePluginOptions, ListAndWatch, GetPreferredAllocation, Allocate and PreStartContainer. Pods are on the
real API server (bound by the scheduler's ServiceAccount with their assignment, as the Binding leaves them)
and the plugin reads them through its own watch, as the node's ServiceAccount. The kubelet's side is the
in-process fake (fake_kubelet.py says why); admission by a real kubelet: tests/sandbox/test_handoff.py."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from kubernetes import client as k8s

from device_plugin.cluster import KubePodCluster
from device_plugin.v1beta1 import api_pb2, api_pb2_grpc
from scheduler.api.allocation import AllocatedGPU, GPUAllocation
from scheduler.api.assignment import AssignedGPU, GPUAssignment
from scheduler.api.keys import GPU_ALLOCATED, GPU_ASSIGNMENT
from tests.controlplane.scene import Scene, wait_until
from tests.device_plugin.conftest import NODE, StartPlugin
from tests.device_plugin.fake_kubelet import FakeKubelet, PodResourcesFake

SLICE_SOCK, WHOLE_SOCK = "tessera-gpu-slice.sock", "nvidia-gpu.sock"
SLICE, WHOLE = "tessera.dev/gpu-slice", "nvidia.com/gpu"


class Scheduler:
    """Plays the scheduler's side on the real API server: a user's pod, bound to the node by a Binding
    that carries its assignment (the scheduler's ServiceAccount)."""

    def __init__(self, scene: Scene, node: str = NODE) -> None:
        self.scene = scene
        self.core = k8s.CoreV1Api(scene.tessera.scheduler_client())
        self.node = node
        scene.node(node, gpus=2)

    def bind(self, name: str, gpus: list[AssignedGPU] | None, *, node: str | None = None,
             resource: str | None = None) -> str:  # fmt: skip
        """A pod asking for what the webhook leaves a pod (one slice per GPU of a fraction, or the whole
        GPUs), bound with the assignment of `gpus`; `gpus=None`: bound without one (another scheduler's)."""
        assignment = GPUAssignment(node=node or self.node, gpus=gpus) if gpus is not None else None
        resource = resource or (WHOLE if assignment is None or assignment.whole_gpus else SLICE)
        count = len(gpus) if gpus else 1
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"schedulerName": "tessera" if gpus is not None else "default-scheduler",
                         "containers": [{"name": "main", "image": "cuda",
                                         "resources": {"limits": {resource: str(count)}}}]}}  # fmt: skip
        uid = str(self.scene.create_pod(body)["metadata"]["uid"])
        meta: dict[str, Any] = {"name": name, "uid": uid}
        if assignment is not None:
            meta["annotations"] = {GPU_ASSIGNMENT: assignment.to_annotation()}
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                   "target": {"apiVersion": "v1", "kind": "Node", "name": self.node}}  # fmt: skip
        self.core.create_namespaced_pod_binding(name, self.scene.ns, binding, _preload_content=False)
        return uid

    def allocation(self, name: str) -> GPUAllocation | None:
        raw = (self.scene.pod(name)["metadata"].get("annotations") or {}).get(GPU_ALLOCATED)
        return None if raw is None else GPUAllocation.from_annotation(raw)

    def plugin_cluster(self) -> KubePodCluster:
        """The device plugin's API access, as the node's ServiceAccount (the chart's device-plugin role)."""
        return KubePodCluster.connect(kubeconfig=str(self.scene.tessera.device_plugin_kubeconfig))


@pytest.fixture
def scheduler(scene: Scene) -> Scheduler:
    return Scheduler(scene)


@pytest.fixture
def pod_resources(kubelet: FakeKubelet) -> Iterator[PodResourcesFake]:
    fake = PodResourcesFake(kubelet.plugin_dir / "pod-resources" / "kubelet.sock").start()
    try:
        yield fake
    finally:
        fake.stop()


def allocate(stub: api_pb2_grpc.DevicePluginStub, *containers: list[str]) -> api_pb2.AllocateResponse:
    req = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids) for ids in containers]
    )
    resp: api_pb2.AllocateResponse = stub.Allocate(req, timeout=10)
    return resp


def preferred(stub: api_pb2_grpc.DevicePluginStub, available: list[str], size: int = 1) -> list[str]:
    req = api_pb2.PreferredAllocationRequest(container_requests=[
        api_pb2.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=size)])  # fmt: skip
    resp = stub.GetPreferredAllocation(req, timeout=10)
    assert len(resp.container_responses) == 1
    return list(resp.container_responses[0].deviceIDs)


def refused(call: Any, *args: Any) -> str:
    with pytest.raises(grpc.RpcError) as err:
        call(*args)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    return str(err.value.details())


def uuids(plugin: Any) -> list[str]:
    return [d.uuid for d in plugin.nvml.devices()]


def in_watch(plugin: Any, uid: str) -> None:
    """The plugin's watch shows the pod (the kubelet sees a bound pod about as soon)."""
    wait_until(lambda: plugin.manager.pods.get(uid) is not None, timeout=10)


def test_registers_both_resources_with_the_kubelet(kubelet: FakeKubelet, start_plugin: StartPlugin) -> None:
    start_plugin()
    requests = kubelet.wait_for_registrations(2)
    by_resource = {r.resource_name: r for r in requests}
    assert set(by_resource) == {"tessera.dev/gpu-slice", "nvidia.com/gpu"}
    for req, sock in (
        (by_resource["tessera.dev/gpu-slice"], SLICE_SOCK),
        (by_resource["nvidia.com/gpu"], WHOLE_SOCK),
    ):
        # Relative endpoint (the kubelet joins it to its dir); PreStartContainer and GetPreferredAllocation.
        assert req == api_pb2.RegisterRequest(
            version="v1beta1",
            endpoint=sock,
            resource_name=req.resource_name,
            options=api_pb2.DevicePluginOptions(
                pre_start_required=True, get_preferred_allocation_available=True
            ),
        )
        assert (kubelet.plugin_dir / sock).exists()
    opts = kubelet.plugin(SLICE_SOCK).GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
    assert opts == api_pb2.DevicePluginOptions(
        pre_start_required=True, get_preferred_allocation_available=True
    )


def test_whole_gpu_endpoint_can_be_turned_off(kubelet: FakeKubelet, start_plugin: StartPlugin) -> None:
    start_plugin(whole_gpu_resource=None)
    assert [r.resource_name for r in kubelet.wait_for_registrations(1)] == ["tessera.dev/gpu-slice"]
    assert not (kubelet.plugin_dir / WHOLE_SOCK).exists()


def test_list_and_watch_sends_devices_then_a_health_change(
    kubelet: FakeKubelet, start_plugin: StartPlugin
) -> None:
    plugin = start_plugin()
    kubelet.wait_for_registrations(2)
    gpu0, gpu1 = uuids(plugin)
    slices = kubelet.plugin(SLICE_SOCK).ListAndWatch(api_pb2.Empty(), timeout=10)
    whole = kubelet.plugin(WHOLE_SOCK).ListAndWatch(api_pb2.Empty(), timeout=10)
    first = next(slices)
    assert sorted(d.ID for d in first.devices) == sorted(f"{u}::{k}" for u in (gpu0, gpu1) for k in range(4))
    assert {d.health for d in first.devices} == {"Healthy"}
    assert [(d.ID, d.health) for d in next(whole).devices] == [(gpu0, "Healthy"), (gpu1, "Healthy")]

    plugin.nvml.inject_xid(1, 13, "graphics engine exception")  # the application's fault: no change
    plugin.nvml.inject_xid(1, 79, "GPU has fallen off the bus")
    changed = next(slices)
    health = {d.ID: d.health for d in changed.devices}
    assert {health[f"{gpu1}::{k}"] for k in range(4)} == {"Unhealthy"}
    assert {health[f"{gpu0}::{k}"] for k in range(4)} == {"Healthy"}
    assert [(d.ID, d.health) for d in next(whole).devices] == [(gpu0, "Healthy"), (gpu1, "Unhealthy")]
    plugin.nvml.lose_gpu(0)  # NVML calls on it now fail: found by the periodic sample
    assert {d.health for d in next(slices).devices} == {"Unhealthy"}
    slices.cancel()
    whole.cancel()


def test_reregisters_after_kubelet_restart_and_after_its_socket_is_deleted(
    kubelet: FakeKubelet, start_plugin: StartPlugin
) -> None:
    start_plugin()
    kubelet.wait_for_registrations(2)
    kubelet.stop()  # kubelet goes down, its socket disappears ...
    restarted = FakeKubelet(kubelet.plugin_dir).start()  # ... and a new one comes up
    try:
        assert {r.resource_name for r in restarted.wait_for_registrations(2)} == {
            "tessera.dev/gpu-slice",
            "nvidia.com/gpu",
        }
        # A restarting kubelet also wipes the plugin dir: the plugin serves a new socket and registers again.
        os.unlink(restarted.plugin_dir / SLICE_SOCK)
        again = restarted.wait_for_registrations(3)[2:]
        assert [r.resource_name for r in again] == ["tessera.dev/gpu-slice"]
        assert (restarted.plugin_dir / SLICE_SOCK).exists()
        devices = next(restarted.plugin(SLICE_SOCK).ListAndWatch(api_pb2.Empty(), timeout=5)).devices
        assert len(devices) == 8
    finally:
        restarted.stop()


@pytest.mark.apiserver
def test_a_fraction_is_answered_then_confirmed_in_prestart_and_marked(
    kubelet: FakeKubelet, start_plugin: StartPlugin, scheduler: Scheduler, pod_resources: PodResourcesFake
) -> None:
    plugin = start_plugin(scheduler.plugin_cluster(), pod_resources_socket=pod_resources.socket)
    kubelet.wait_for_registrations(2)
    gpu0, gpu1 = uuids(plugin)
    uid = scheduler.bind("frac", [AssignedGPU(index=1, uuid=gpu1, milli=500)])
    in_watch(plugin, uid)
    pod_resources.held[(scheduler.scene.ns, "frac")] = {"main": {}}  # the kubelet admits it
    stub = kubelet.plugin(SLICE_SOCK)
    assert preferred(stub, [f"{gpu0}::0", f"{gpu0}::1", f"{gpu1}::3"]) == [f"{gpu1}::3"]
    assert allocate(stub, [f"{gpu1}::3"]) == api_pb2.AllocateResponse(container_responses=[
        api_pb2.ContainerAllocateResponse(envs={
            "NVIDIA_VISIBLE_DEVICES": gpu1, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40960M", "CUDA_DEVICE_MEMORY_LIMIT": "40960m",
            "CUDA_DEVICE_MEMORY_LIMIT_0": "40960m", "CUDA_DEVICE_SM_LIMIT": "50"})])  # fmt: skip
    pod_resources.held[(scheduler.scene.ns, "frac")] = {"main": {SLICE: [f"{gpu1}::3"]}}
    request = api_pb2.PreStartContainerRequest(devices_ids=[f"{gpu1}::3"])
    assert stub.PreStartContainer(request, timeout=10) == api_pb2.PreStartContainerResponse()
    mark = wait_until(lambda: scheduler.allocation("frac"), timeout=10)
    assert mark.gpus == [AllocatedGPU(index=1, uuid=gpu1)]


@pytest.mark.apiserver
def test_whole_gpus_and_a_pod_another_scheduler_placed(
    kubelet: FakeKubelet, start_plugin: StartPlugin, scheduler: Scheduler, pod_resources: PodResourcesFake
) -> None:
    """A placed pod gets its assigned GPUs; then a pod the default scheduler placed gets the GPU left, as
    NVIDIA's plugin would, and is marked with it (the scheduler charges it there)."""
    plugin = start_plugin(scheduler.plugin_cluster(), pod_resources_socket=pod_resources.socket)
    kubelet.wait_for_registrations(2)
    gpu0, gpu1 = uuids(plugin)
    ns, stub = scheduler.scene.ns, kubelet.plugin(WHOLE_SOCK)
    in_watch(plugin, scheduler.bind("whole", [AssignedGPU(index=0, uuid=gpu0, milli=1000)]))
    pod_resources.held[(ns, "whole")] = {"main": {}}
    assert preferred(stub, [gpu1, gpu0]) == [gpu0]
    expected = api_pb2.AllocateResponse(
        container_responses=[api_pb2.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": gpu0})]
    )
    assert allocate(stub, [gpu0]) == expected
    pod_resources.held[(ns, "whole")] = {"main": {WHOLE: [gpu0]}}
    in_watch(plugin, scheduler.bind("theirs", None))
    pod_resources.held[(ns, "theirs")] = {"main": {}}
    assert preferred(stub, [gpu1]) == [gpu1]
    why = refused(allocate, stub, [gpu0])  # the kubelet would not offer it (held), nor may it be given
    assert why == (
        f"tessera: pod {ns}/theirs was not placed by the Tessera scheduler and gets only a GPU nobody uses, "
        f"but the kubelet offered {gpu0}, which the scheduler assigned to pod {ns}/whole (no GPU of node "
        f"{NODE} is free for it)"
    )
    assert allocate(stub, [gpu1]) == api_pb2.AllocateResponse(
        container_responses=[api_pb2.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": gpu1})]
    )
    pod_resources.held[(ns, "theirs")] = {"main": {WHOLE: [gpu1]}}
    assert wait_until(lambda: scheduler.allocation("theirs"), timeout=10).gpus == [
        AllocatedGPU(index=1, uuid=gpu1)
    ]
    assert wait_until(lambda: scheduler.allocation("whole"), timeout=10).gpus == [
        AllocatedGPU(index=0, uuid=gpu0)
    ]


@pytest.mark.apiserver
def test_refusals_reach_the_kubelet_as_failed_precondition_with_the_reason(
    kubelet: FakeKubelet, start_plugin: StartPlugin, scheduler: Scheduler, pod_resources: PodResourcesFake
) -> None:
    plugin = start_plugin(scheduler.plugin_cluster(), pod_resources_socket=pod_resources.socket)
    kubelet.wait_for_registrations(2)
    gpu0, gpu1 = uuids(plugin)
    ns, stub = scheduler.scene.ns, kubelet.plugin(SLICE_SOCK)
    in_watch(plugin, scheduler.bind("lost", [AssignedGPU(index=0, uuid=gpu0, milli=500)], node="gpu-node-7"))
    pod_resources.held[(ns, "lost")] = {"main": {}}
    assert refused(allocate, stub, [f"{gpu0}::0"]) == (
        f"tessera: pod {ns}/lost is assigned to node gpu-node-7 but this is node {NODE}"
    )
    del pod_resources.held[(ns, "lost")]
    # a's slice answered, then listed as held by b (a pod Tessera did not place): b's container must not start.
    in_watch(plugin, scheduler.bind("a", [AssignedGPU(index=1, uuid=gpu1, milli=500)]))
    pod_resources.held[(ns, "a")] = {"main": {}}
    allocate(stub, [f"{gpu1}::0"])
    in_watch(plugin, scheduler.bind("b", None, resource=SLICE))
    pod_resources.held = {(ns, "b"): {"main": {SLICE: [f"{gpu1}::0"]}}}
    assert refused(stub.PreStartContainer, api_pb2.PreStartContainerRequest(devices_ids=[f"{gpu1}::0"])) == (
        f"tessera: the kubelet gave devices {gpu1}::0 to pod {ns}/b, but Allocate answered them with the GPUs "
        f"of pod {ns}/a: {ns}/b's container must not start on another pod's GPUs (delete the pod to have it "
        "admitted again)"
    )
    time.sleep(0.2)
    assert scheduler.allocation("a") is None and scheduler.allocation("b") is None


def test_standalone_allocate_fails_clearly(kubelet: FakeKubelet, start_plugin: StartPlugin) -> None:
    plugin = start_plugin(None)
    kubelet.wait_for_registrations(2)
    with pytest.raises(grpc.RpcError) as err:
        allocate(kubelet.plugin(SLICE_SOCK), [f"{uuids(plugin)[0]}::0"])
    assert "no Kubernetes API configured" in err.value.details()


def test_refused_registration_is_retried(kubelet: FakeKubelet, start_plugin: StartPlugin) -> None:
    kubelet.refuse = 1
    start_plugin()
    requests = kubelet.wait_for_registrations(3)
    assert requests[0].resource_name == requests[1].resource_name  # the refused one came again
    assert {r.resource_name for r in requests} == {"tessera.dev/gpu-slice", "nvidia.com/gpu"}
