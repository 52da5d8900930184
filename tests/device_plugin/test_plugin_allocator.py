"""The bind-lock hand-off and the limits it computes, against an in-memory cluster."""

from __future__ import annotations

from dataclasses import replace

import pytest

from device_plugin.allocator import AllocationError, Allocator
from device_plugin.cluster import PodView
from device_plugin.inventory import Inventory
from device_plugin.resources import Resource
from node_agent.nvml.facade import DeviceInfo
from scheduler.api.assignment import AssignedGPU, GPUAssignment
from scheduler.api.bind_lock import BindLock
from scheduler.api.keys import GPU_ALLOCATED, GPU_ASSIGNMENT
from tests.device_plugin.memcluster import MemCluster

NODE = "node-a"
GPU0, GPU1 = "GPU-00000000-aaaa", "GPU-11111111-bbbb"
SLICES = Resource("tessera.dev/gpu-slice", "slice", slices_per_gpu=4)
WHOLE = Resource("nvidia.com/gpu", "whole")


def inventory() -> Inventory:
    return Inventory(
        [DeviceInfo(0, GPU0, "NVIDIA A100-SXM4-80GB", 81920), DeviceInfo(1, GPU1, "A100", 40960)]
    )


def bound_pod(
    cluster: MemCluster,
    name: str,
    gpus: list[AssignedGPU],
    *,
    node: str = NODE,
    lock: bool = True,
    wants: str | None = None,
) -> PodView:
    assignment = GPUAssignment(node=node, gpus=gpus)
    # The resource its container asks for (the webhook gives a fraction its slice limit).
    wants = wants or (WHOLE.name if assignment.whole_gpus else SLICES.name)
    pod = PodView(
        "team", name, f"uid-{name}", node, {GPU_ASSIGNMENT: assignment.to_annotation()},
        resources=frozenset({wants}),
    )  # fmt: skip
    cluster.add_pod(pod)
    if lock:
        cluster.locks[NODE] = BindLock.for_pod("team", name, pod.uid).to_annotation()
    return pod


def allocator(cluster: MemCluster | None, inv: Inventory | None = None, **kw: object) -> Allocator:
    clock = [0.0]

    def sleep(s: float) -> None:
        clock[0] += s

    return Allocator(NODE, inv or inventory(), cluster, clock=lambda: clock[0], sleep=sleep, **kw)  # type: ignore[arg-type]


def test_fraction_gets_its_gpu_and_limits_then_pod_marked_and_lock_released() -> None:
    cluster = MemCluster()
    bound_pod(cluster, "p", [AssignedGPU(index=1, uuid=GPU1, milli=250)])
    [resp] = allocator(cluster).allocate(SLICES, [[f"{GPU1}::0"]])
    assert dict(resp.envs) == {
        "NVIDIA_VISIBLE_DEVICES": GPU1,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10240M",
        "CUDA_DEVICE_MEMORY_LIMIT": "10240m",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "10240m",
        "CUDA_DEVICE_SM_LIMIT": "25",
    }
    assert GPU_ALLOCATED in cluster.pods[("team", "p")].annotations
    assert NODE not in cluster.locks


def test_memory_request_uses_assigned_mib_and_two_devices_are_renumbered() -> None:
    cluster = MemCluster()
    gpus = [
        AssignedGPU(index=0, uuid=GPU0, milli=100, memoryMiB=8192),
        AssignedGPU(index=1, milli=200, memoryMiB=8192),
    ]
    bound_pod(cluster, "p", gpus)
    [resp] = allocator(cluster).allocate(SLICES, [[f"{GPU0}::3", f"{GPU1}::0"]])
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == f"{GPU0},{GPU1}"  # GPU 1 found by index
    assert resp.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M,1=8192M"
    assert resp.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "20"
    assert resp.envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "8192m"


def test_whole_gpus_spread_over_two_containers_release_the_lock_after_the_last() -> None:
    cluster = MemCluster()
    bound_pod(
        cluster,
        "w",
        [AssignedGPU(index=0, uuid=GPU0, milli=1000), AssignedGPU(index=1, uuid=GPU1, milli=1000)],
    )
    alloc = allocator(cluster)
    [first] = alloc.allocate(WHOLE, [[GPU1]])
    assert dict(first.envs) == {"NVIDIA_VISIBLE_DEVICES": GPU1}
    assert NODE in cluster.locks and GPU_ALLOCATED not in cluster.pods[("team", "w")].annotations
    assert alloc.preferred(WHOLE, [GPU1, GPU0], [], 1) == [GPU0]
    [second] = alloc.allocate(WHOLE, [[GPU0]])
    assert dict(second.envs) == {"NVIDIA_VISIBLE_DEVICES": GPU0}
    assert NODE not in cluster.locks and GPU_ALLOCATED in cluster.pods[("team", "w")].annotations


def test_whole_gpu_not_assigned_is_refused() -> None:
    cluster = MemCluster()
    bound_pod(cluster, "w", [AssignedGPU(index=0, uuid=GPU0, milli=1000)])
    with pytest.raises(AllocationError, match=f"offered GPU {GPU1} but pod team/w was assigned {GPU0}"):
        allocator(cluster).allocate(WHOLE, [[GPU1]])
    assert NODE in cluster.locks


@pytest.mark.parametrize(
    ("gpus", "node", "resource", "ids", "message"),
    [
        (
            [AssignedGPU(index=0, uuid=GPU0, milli=500)],
            "node-b",
            SLICES,
            [f"{GPU0}::0"],
            "assigned to node node-b but this is node node-a",
        ),
        (
            [AssignedGPU(index=0, uuid="GPU-elsewhere", milli=500)],
            NODE,
            SLICES,
            [f"{GPU0}::0"],
            "GPU GPU-elsewhere, which node node-a does not have",
        ),
        (
            [AssignedGPU(index=0, uuid=GPU0, milli=500)],
            NODE,
            SLICES,
            [f"{GPU0}::0", f"{GPU0}::1"],
            "asks for 2 tessera.dev/gpu-slice but the scheduler assigned it 1 GPU",
        ),
        (
            [AssignedGPU(index=0, uuid=GPU0, milli=1000)],
            NODE,
            SLICES,
            [f"{GPU0}::0"],
            "was assigned whole GPUs",
        ),
        ([AssignedGPU(index=0, uuid=GPU0, milli=500)], NODE, WHOLE, [GPU0], "assigned a GPU fraction"),
        (
            [AssignedGPU(index=1, uuid=GPU1, milli=500, memoryMiB=50000)],
            NODE,
            SLICES,
            [f"{GPU1}::0"],
            "50000 MiB on GPU GPU-11111111-bbbb, which has 40960 MiB",
        ),
    ],
)
def test_mismatches_fail_with_a_readable_message_and_keep_the_lock(
    gpus: list[AssignedGPU], node: str, resource: Resource, ids: list[str], message: str
) -> None:
    cluster = MemCluster()
    bound_pod(cluster, "p", gpus, node=node, wants=resource.name)
    with pytest.raises(AllocationError, match=message):
        allocator(cluster).allocate(resource, [ids])
    assert NODE in cluster.locks
    assert GPU_ALLOCATED not in cluster.pods[("team", "p")].annotations


def test_unhealthy_gpu_is_refused() -> None:
    cluster, inv = MemCluster(), inventory()
    inv.set_health(0, False, "Xid 79: fallen off the bus")
    bound_pod(cluster, "p", [AssignedGPU(index=0, uuid=GPU0, milli=500)])
    with pytest.raises(AllocationError, match=r"unhealthy \(Xid 79: fallen off the bus\)"):
        allocator(cluster, inv).allocate(SLICES, [[f"{GPU0}::0"]])


def test_malformed_assignment_and_lock_are_reported() -> None:
    cluster = MemCluster()
    pod = bound_pod(cluster, "p", [AssignedGPU(index=0, uuid=GPU0, milli=500)])
    cluster.add_pod(replace(pod, annotations={GPU_ASSIGNMENT: '{"node": ""}'}))
    with pytest.raises(AllocationError, match="gpu-assignment is malformed"):
        allocator(cluster).allocate(SLICES, [[f"{GPU0}::0"]])
    cluster.locks[NODE] = "not json"
    with pytest.raises(AllocationError, match="bind-lock is malformed"):
        allocator(cluster).allocate(SLICES, [[f"{GPU0}::0"]])


def test_no_lock_waits_then_fails() -> None:
    cluster = MemCluster()
    with pytest.raises(AllocationError, match="no pod holds the bind lock"):
        allocator(cluster, lock_wait_s=0.5).allocate(SLICES, [[f"{GPU0}::0"]])
    # It kept polling for the lock during the wait instead of giving up at once.
    assert cluster.calls.count(f"read_lock {NODE}") >= 10


def test_stale_lock_of_an_allocated_pod_is_dropped_not_reused() -> None:
    cluster = MemCluster()
    bound_pod(cluster, "p", [AssignedGPU(index=0, uuid=GPU0, milli=500)])
    alloc = allocator(cluster, lock_wait_s=0)
    alloc.allocate(SLICES, [[f"{GPU0}::0"]])
    # The scheduler re-writes the same lock by mistake: the allocated pod must not be served twice.
    cluster.locks[NODE] = BindLock.for_pod("team", "p", "uid-p").to_annotation()
    with pytest.raises(AllocationError, match="no pod holds the bind lock"):
        alloc.allocate(SLICES, [[f"{GPU0}::1"]])
    assert NODE not in cluster.locks


def test_lock_naming_a_replaced_pod_is_dropped() -> None:
    cluster = MemCluster()
    bound_pod(cluster, "p", [AssignedGPU(index=0, uuid=GPU0, milli=500)])
    cluster.locks[NODE] = BindLock.for_pod("team", "p", "uid-of-an-older-p").to_annotation()
    with pytest.raises(AllocationError, match="no pod holds the bind lock"):
        allocator(cluster, lock_wait_s=0).allocate(SLICES, [[f"{GPU0}::0"]])
    assert NODE not in cluster.locks


def test_standalone_and_unreachable_api_fail_clearly() -> None:
    with pytest.raises(AllocationError, match="no Kubernetes API configured"):
        allocator(None).allocate(SLICES, [[f"{GPU0}::0"]])
    with pytest.raises(AllocationError, match="etcd is on fire"):
        allocator(MemCluster(fail_reads=True)).allocate(SLICES, [[f"{GPU0}::0"]])


def test_preferred_allocation_steers_to_the_assigned_gpu() -> None:
    cluster = MemCluster()
    bound_pod(cluster, "p", [AssignedGPU(index=1, uuid=GPU1, milli=500)])
    alloc = allocator(cluster)
    available = [f"{GPU0}::{k}" for k in range(4)] + [f"{GPU1}::{k}" for k in (2, 3)]
    assert alloc.preferred(SLICES, available, [], 1) == [f"{GPU1}::2"]
    # Without a lock it still answers (Allocate is where a missing assignment fails).
    assert allocator(MemCluster()).preferred(SLICES, available, [], 2) == available[:2]


def test_mps_pipe_dir_is_mounted() -> None:
    cluster = MemCluster()
    bound_pod(cluster, "p", [AssignedGPU(index=0, uuid=GPU0, milli=333)])
    [resp] = allocator(cluster, mps_pipe_dir="/run/nvidia/mps").allocate(SLICES, [[f"{GPU0}::0"]])
    assert [(m.host_path, m.container_path) for m in resp.mounts] == [("/run/nvidia/mps", "/run/nvidia/mps")]
    assert resp.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/run/nvidia/mps"
    assert resp.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "34"
    assert resp.envs["CUDA_DEVICE_MEMORY_LIMIT"] == f"{333 * 81920 // 1000}m"
