"""The plugin driven through real gRPC by an in-process fake kubelet, pods looked up in the real API server
with the device plugin's ServiceAccount."""

from __future__ import annotations

import os
import threading
from typing import Any

import grpc
import pytest
from kubernetes import client as k8s

from device_plugin.cluster import KubePodCluster
from device_plugin.v1beta1 import api_pb2, api_pb2_grpc
from scheduler.api.assignment import AssignedGPU, GPUAssignment
from scheduler.api.bind_lock import BindLock
from scheduler.api.keys import BIND_LOCK, GPU_ALLOCATED, GPU_ASSIGNMENT
from tests.controlplane.scene import Scene
from tests.device_plugin.conftest import NODE, StartPlugin
from tests.device_plugin.fake_kubelet import FakeKubelet

SLICE_SOCK, WHOLE_SOCK = "tessera-gpu-slice.sock", "nvidia-gpu.sock"


class Scheduler:
    """Plays the scheduler's side of the hand-off on the real API server: a user's pod bound to the node with
    its assignment, and the node's bind lock taken by the scheduler's ServiceAccount."""

    def __init__(self, scene: Scene, node: str = NODE) -> None:
        self.scene = scene
        self.core = k8s.CoreV1Api(scene.tessera.scheduler_client())
        self.node = node
        scene.node(node, gpus=2)

    def bind(self, name: str, gpus: list[AssignedGPU], *, node: str | None = None, lock: bool = True) -> str:
        """A user's pod with the scheduler's assignment; as the binder does, the node is locked for it and
        then it is bound (with `lock=False` it waits unbound until `place`). It asks for what the webhook
        leaves a pod: one slice per GPU of a fraction, or the whole GPUs."""
        assignment = GPUAssignment(node=node or self.node, gpus=gpus)
        resource = "nvidia.com/gpu" if assignment.whole_gpus else "tessera.dev/gpu-slice"
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "annotations": {GPU_ASSIGNMENT: assignment.to_annotation()}},
                "spec": {"schedulerName": "tessera",
                         "containers": [{"name": "main", "image": "cuda",
                                         "resources": {"limits": {resource: str(len(gpus))}}}]}}  # fmt: skip
        uid = str(self.scene.create_pod(body)["metadata"]["uid"])
        if lock:
            self.place(name, uid)
        return uid

    def place(self, name: str, uid: str) -> None:
        """Lock the node for the pod, then bind it there (the scheduler's account)."""
        self.lock(name, uid)
        binding = k8s.V1Binding(
            metadata=k8s.V1ObjectMeta(name=name, uid=uid),
            target=k8s.V1ObjectReference(api_version="v1", kind="Node", name=self.node),
        )
        self.core.create_namespaced_pod_binding(name, self.scene.ns, binding, _preload_content=False)

    def lock(self, name: str, uid: str) -> None:
        value = BindLock.for_pod(self.scene.ns, name, uid).to_annotation()
        self.core.patch_node(self.node, {"metadata": {"annotations": {BIND_LOCK: value}}})

    def lock_holder(self) -> str | None:
        raw = (self.scene.node_obj(self.node)["metadata"].get("annotations") or {}).get(BIND_LOCK)
        return None if raw is None else BindLock.from_annotation(raw).pod

    def allocated(self, name: str) -> bool:
        return GPU_ALLOCATED in (self.scene.pod(name)["metadata"].get("annotations") or {})

    def plugin_cluster(self) -> KubePodCluster:
        """The device plugin's API access, as the node's ServiceAccount (the chart's device-plugin role)."""
        return KubePodCluster.connect(kubeconfig=str(self.scene.tessera.device_plugin_kubeconfig))


@pytest.fixture
def scheduler(scene: Scene) -> Scheduler:
    return Scheduler(scene)


def allocate(stub: api_pb2_grpc.DevicePluginStub, *containers: list[str]) -> api_pb2.AllocateResponse:
    req = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids) for ids in containers]
    )
    resp: api_pb2.AllocateResponse = stub.Allocate(req, timeout=10)
    return resp


def uuids(plugin: Any) -> list[str]:
    return [d.uuid for d in plugin.nvml.devices()]


def test_registers_both_resources_with_the_kubelet(kubelet: FakeKubelet, start_plugin: StartPlugin) -> None:
    start_plugin()
    requests = kubelet.wait_for_registrations(2)
    by_resource = {r.resource_name: r for r in requests}
    assert set(by_resource) == {"tessera.dev/gpu-slice", "nvidia.com/gpu"}
    for req, sock in (
        (by_resource["tessera.dev/gpu-slice"], SLICE_SOCK),
        (by_resource["nvidia.com/gpu"], WHOLE_SOCK),
    ):
        assert req.version == "v1beta1"
        assert req.endpoint == sock  # relative to the plugin dir, as the kubelet joins it
        assert req.options.get_preferred_allocation_available and not req.options.pre_start_required
        assert (kubelet.plugin_dir / sock).exists()
    opts = kubelet.plugin(SLICE_SOCK).GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
    assert opts.get_preferred_allocation_available


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
def test_allocate_fraction(kubelet: FakeKubelet, start_plugin: StartPlugin, scheduler: Scheduler) -> None:
    plugin = start_plugin(scheduler.plugin_cluster())
    kubelet.wait_for_registrations(2)
    gpu0, gpu1 = uuids(plugin)
    scheduler.bind("frac", [AssignedGPU(index=1, uuid=gpu1, milli=500)])
    stub = kubelet.plugin(SLICE_SOCK)
    pref = stub.GetPreferredAllocation(
        api_pb2.PreferredAllocationRequest(
            container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=[f"{gpu0}::0", f"{gpu0}::1", f"{gpu1}::3"], allocation_size=1
                )
            ]
        ),
        timeout=5,
    )
    assert list(pref.container_responses[0].deviceIDs) == [f"{gpu1}::3"]
    [resp] = allocate(stub, [f"{gpu1}::3"]).container_responses
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == gpu1
    assert resp.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert resp.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=40960M"  # half of 80 GiB
    assert resp.envs["CUDA_DEVICE_MEMORY_LIMIT"] == "40960m"
    assert scheduler.allocated("frac") and scheduler.lock_holder() is None


@pytest.mark.apiserver
def test_allocate_memory_and_two_devices(
    kubelet: FakeKubelet, start_plugin: StartPlugin, scheduler: Scheduler
) -> None:
    plugin = start_plugin(scheduler.plugin_cluster())
    kubelet.wait_for_registrations(2)
    gpu0, gpu1 = uuids(plugin)
    stub = kubelet.plugin(SLICE_SOCK)

    scheduler.bind("mem", [AssignedGPU(index=0, uuid=gpu0, milli=100, memoryMiB=8192)])
    [resp] = allocate(stub, [f"{gpu0}::0"]).container_responses
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == gpu0
    assert resp.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M"
    assert resp.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "10"

    scheduler.bind(
        "two", [AssignedGPU(index=0, uuid=gpu0, milli=250), AssignedGPU(index=1, uuid=gpu1, milli=250)]
    )
    [resp] = allocate(stub, [f"{gpu0}::1", f"{gpu1}::1"]).container_responses
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == f"{gpu0},{gpu1}"
    assert resp.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M,1=20480M"
    assert scheduler.allocated("mem") and scheduler.allocated("two") and scheduler.lock_holder() is None


@pytest.mark.apiserver
def test_allocate_whole_gpus(kubelet: FakeKubelet, start_plugin: StartPlugin, scheduler: Scheduler) -> None:
    plugin = start_plugin(scheduler.plugin_cluster())
    kubelet.wait_for_registrations(2)
    gpu0, gpu1 = uuids(plugin)
    scheduler.bind(
        "whole", [AssignedGPU(index=0, uuid=gpu0, milli=1000), AssignedGPU(index=1, uuid=gpu1, milli=1000)]
    )
    [resp] = allocate(kubelet.plugin(WHOLE_SOCK), [gpu0, gpu1]).container_responses
    assert dict(resp.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{gpu0},{gpu1}"}
    assert scheduler.allocated("whole") and scheduler.lock_holder() is None


@pytest.mark.apiserver
def test_wrong_node_assignment_is_rejected(
    kubelet: FakeKubelet, start_plugin: StartPlugin, scheduler: Scheduler
) -> None:
    plugin = start_plugin(scheduler.plugin_cluster())
    kubelet.wait_for_registrations(2)
    gpu0 = uuids(plugin)[0]
    scheduler.bind("lost", [AssignedGPU(index=0, uuid=gpu0, milli=500)], node="gpu-node-7")
    with pytest.raises(grpc.RpcError) as err:
        allocate(kubelet.plugin(SLICE_SOCK), [f"{gpu0}::0"])
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert (
        f"pod {scheduler.scene.ns}/lost is assigned to node gpu-node-7 but this is node gpu-node-1"
        in err.value.details()
    )
    assert not scheduler.allocated("lost") and scheduler.lock_holder() == f"{scheduler.scene.ns}/lost"


@pytest.mark.apiserver
def test_two_concurrent_allocations_are_kept_apart(
    kubelet: FakeKubelet, start_plugin: StartPlugin, scheduler: Scheduler
) -> None:
    plugin = start_plugin(scheduler.plugin_cluster())
    kubelet.wait_for_registrations(2)
    gpu0, gpu1 = uuids(plugin)
    scheduler.bind("a", [AssignedGPU(index=0, uuid=gpu0, milli=300)])
    uid_b = scheduler.bind("b", [AssignedGPU(index=1, uuid=gpu1, milli=700)], lock=False)

    def hand_lock_to_b() -> None:
        # The scheduler locks the node for b only once a's allocation released it.
        while scheduler.lock_holder() is not None:
            threading.Event().wait(0.01)
        scheduler.place("b", uid_b)

    stub = kubelet.plugin(SLICE_SOCK)
    start = threading.Barrier(3)
    results: dict[str, str] = {}

    def kubelet_admits(slot: str, device: str) -> None:
        start.wait()
        resp = allocate(stub, [device])
        results[slot] = resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"]

    threads = [
        threading.Thread(target=kubelet_admits, args=("x", f"{gpu0}::0")),
        threading.Thread(target=kubelet_admits, args=("y", f"{gpu1}::0")),
    ]
    for t in threads:
        t.start()
    start.wait()
    hand_lock_to_b()
    for t in threads:
        t.join(timeout=15)
    assert sorted(results.values()) == sorted([gpu0, gpu1])  # each pod's GPU exactly once
    assert scheduler.allocated("a") and scheduler.allocated("b") and scheduler.lock_holder() is None


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
