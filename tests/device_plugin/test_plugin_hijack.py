"""Nobody but the pod the scheduler bound may take its `Allocate` answer (issue 14's bind-lock hijacks),
driven through the real gRPC socket as a kubelet admitting pods one at a time, pods on the real API server
and the plugin as its own ServiceAccount.

While the scheduler's pod A holds the node's bind lock, the kubelet may admit another pod first: one whose
author set `spec.nodeName` and asked for `tessera.dev/gpu-slice`, or another scheduler's pod asking for
`nvidia.com/gpu`. Its Allocate must be refused (the kubelet then fails that pod) and A must still get
its own GPUs afterwards. A `tessera.dev/gpu-allocated` a user preset on A must not end A's lock early."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from device_plugin.v1beta1 import api_pb2_grpc
from scheduler.api.assignment import AssignedGPU
from scheduler.api.keys import GPU_ALLOCATED
from tests.controlplane.scene import Scene
from tests.device_plugin.conftest import RunningPlugin, StartPlugin
from tests.device_plugin.fake_kubelet import FakeKubelet
from tests.device_plugin.test_plugin_grpc import SLICE_SOCK, WHOLE_SOCK, Scheduler, allocate, uuids

pytestmark = pytest.mark.apiserver
FAST = {"lock_wait_s": 1.0}


@pytest.fixture
def scheduler(scene: Scene) -> Scheduler:
    return Scheduler(scene)


def intruder(scheduler: Scheduler, name: str, resource: str, *, scheduler_name: str = "tessera") -> str:
    """A pod its author put on the node directly (spec.nodeName), asking for `resource` (the webhook, which
    would refuse it, is not installed here: this is the plugin's own line of defence)."""
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": scheduler.node, "schedulerName": scheduler_name,
                     "containers": [{"name": "main", "image": "cuda", "resources": {"limits": {resource: "1"}}}]}}  # fmt: skip
    return str(scheduler.scene.create_pod(body)["metadata"]["uid"])


def kubelet_fails(scheduler: Scheduler, name: str) -> None:
    """What the kubelet does with a pod whose admission failed (UnexpectedAdmissionError)."""
    scheduler.scene.core.patch_namespaced_pod_status(
        name, scheduler.scene.ns, {"status": {"phase": "Failed", "reason": "UnexpectedAdmissionError"}}
    )


def refused(stub: api_pb2_grpc.DevicePluginStub, *ids: str) -> str:
    with pytest.raises(grpc.RpcError) as err:
        allocate(stub, list(ids))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    return str(err.value.details())


@pytest.fixture
def plugin(kubelet: FakeKubelet, start_plugin: StartPlugin, scheduler: Scheduler) -> RunningPlugin:
    running = start_plugin(scheduler.plugin_cluster(), **FAST)
    kubelet.wait_for_registrations(2)
    return running


@pytest.mark.parametrize("scheduler_name", ["tessera", "default-scheduler"])
def test_a_preset_node_slice_pod_cannot_take_the_locked_pods_gpu(
    kubelet: FakeKubelet, plugin: RunningPlugin, scheduler: Scheduler, scheduler_name: str
) -> None:
    _, gpu1 = uuids(plugin)
    scheduler.bind("a", [AssignedGPU(index=1, uuid=gpu1, milli=500)])
    intruder(scheduler, "x", "tessera.dev/gpu-slice", scheduler_name=scheduler_name)
    stub = kubelet.plugin(SLICE_SOCK)
    # The kubelet admits x first: it gets nothing, a keeps its lock.
    message = refused(stub, f"{gpu1}::0")
    ns = scheduler.scene.ns
    assert "cannot tell which pod the kubelet is admitting" in message and f"{ns}/x" in message
    assert not scheduler.allocated("a") and scheduler.lock_holder() == f"{ns}/a"
    kubelet_fails(scheduler, "x")
    [resp] = allocate(stub, [f"{gpu1}::1"]).container_responses  # then a, on its own GPU
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == gpu1
    assert scheduler.allocated("a") and scheduler.lock_holder() is None


def test_another_schedulers_whole_gpu_pod_cannot_take_the_locked_pods_gpus(
    kubelet: FakeKubelet, plugin: RunningPlugin, scheduler: Scheduler
) -> None:
    gpu0, _ = uuids(plugin)
    scheduler.bind("a", [AssignedGPU(index=0, uuid=gpu0, milli=1000)])
    intruder(scheduler, "x", "nvidia.com/gpu", scheduler_name="default-scheduler")
    stub = kubelet.plugin(WHOLE_SOCK)
    assert f"{scheduler.scene.ns}/x" in refused(stub, gpu0)
    assert not scheduler.allocated("a") and scheduler.lock_holder() == f"{scheduler.scene.ns}/a"
    kubelet_fails(scheduler, "x")
    [resp] = allocate(stub, [gpu0]).container_responses
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == gpu0 and scheduler.allocated("a")


def test_a_whole_gpu_pod_cannot_take_a_fractional_pods_answer(
    kubelet: FakeKubelet, plugin: RunningPlugin, scheduler: Scheduler
) -> None:
    gpu0, _ = uuids(plugin)
    scheduler.bind("a", [AssignedGPU(index=0, uuid=gpu0, milli=250)])
    intruder(scheduler, "x", "nvidia.com/gpu", scheduler_name="default-scheduler")
    assert "asks for no nvidia.com/gpu" in refused(kubelet.plugin(WHOLE_SOCK), gpu0)
    assert scheduler.lock_holder() == f"{scheduler.scene.ns}/a"


def test_an_intruder_the_kubelet_already_failed_does_not_block(
    kubelet: FakeKubelet, plugin: RunningPlugin, scheduler: Scheduler
) -> None:
    _, gpu1 = uuids(plugin)
    scheduler.bind("a", [AssignedGPU(index=1, uuid=gpu1, milli=500)])
    intruder(scheduler, "x", "tessera.dev/gpu-slice")
    kubelet_fails(scheduler, "x")
    [resp] = allocate(kubelet.plugin(SLICE_SOCK), [f"{gpu1}::0"]).container_responses
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == gpu1


def test_a_preset_gpu_allocated_does_not_release_the_lock_early(
    kubelet: FakeKubelet, plugin: RunningPlugin, scheduler: Scheduler
) -> None:
    _, gpu1 = uuids(plugin)
    uid = scheduler.bind("a", [AssignedGPU(index=1, uuid=gpu1, milli=500)], lock=False)
    scheduler.scene.core.patch_namespaced_pod(
        "a", scheduler.scene.ns, {"metadata": {"annotations": {GPU_ALLOCATED: "2020-01-01T00:00:00Z"}}}
    )  # as if the user had written it on the pod
    scheduler.place("a", uid)
    [resp] = allocate(kubelet.plugin(SLICE_SOCK), [f"{gpu1}::0"]).container_responses
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == gpu1
    annotations: dict[str, Any] = scheduler.scene.pod("a")["metadata"]["annotations"]
    assert annotations[GPU_ALLOCATED] != "2020-01-01T00:00:00Z"  # written by the plugin when it served a
    assert scheduler.lock_holder() is None


def test_a_served_pod_left_holding_the_lock_is_released_after_a_restart(
    kubelet: FakeKubelet, start_plugin: StartPlugin, scheduler: Scheduler
) -> None:
    """The mark plus containers the kubelet started: served by an earlier plugin process."""
    plugin = start_plugin(scheduler.plugin_cluster(), **FAST)
    kubelet.wait_for_registrations(2)
    gpu0, gpu1 = uuids(plugin)
    scheduler.bind("old", [AssignedGPU(index=0, uuid=gpu0, milli=500)])
    core, ns = scheduler.scene.core, scheduler.scene.ns
    core.patch_namespaced_pod("old", ns, {"metadata": {"annotations": {GPU_ALLOCATED: "t"}}})
    core.patch_namespaced_pod_status(
        "old", ns,
        {"status": {"containerStatuses": [{"name": "main", "image": "cuda", "imageID": "", "ready": False,
                                           "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}},
    )  # fmt: skip
    stub = kubelet.plugin(SLICE_SOCK)
    message = refused(stub, f"{gpu1}::0")  # nothing else holds the lock: old's stale lock is dropped
    assert "no pod holds the bind lock" in message and scheduler.lock_holder() is None
