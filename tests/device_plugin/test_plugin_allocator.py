"""The device plugin's decisions (device_plugin/allocator.py): which pod the kubelet admits, what each of its
containers is answered, what PreStartContainer lets start, and the limits; against in-memory sources
(tests/device_plugin/memkubelet.py says why). The same hand-off on real kubelets: tests/sandbox/test_handoff.py;
through the real gRPC socket: test_plugin_grpc.py."""

from __future__ import annotations

import time

import pytest

from device_plugin.allocator import AllocationError, Allocator
from device_plugin.confirm import Confirmations
from device_plugin.inventory import Inventory
from device_plugin.resources import Resource
from device_plugin.v1beta1 import api_pb2
from node_agent.nvml.facade import DeviceInfo
from scheduler.api.allocation import AllocatedGPU, GPUAllocation
from scheduler.api.assignment import AssignedGPU
from tests.device_plugin.memkubelet import NODE, MemKubelet, MemMarker, MemPods, container, pod_obj

GPU0, GPU1 = "GPU-00000000-aaaa", "GPU-11111111-bbbb"
SLICE, WHOLE = "tessera.dev/gpu-slice", "nvidia.com/gpu"
SLICES = Resource(SLICE, "slice", slices_per_gpu=4)
WHOLES = Resource(WHOLE, "whole")


def inventory() -> Inventory:
    return Inventory(
        [DeviceInfo(0, GPU0, "NVIDIA A100-SXM4-80GB", 81920), DeviceInfo(1, GPU1, "A100", 40960)]
    )


class World:
    def __init__(self, *, kubelet: bool = True, **kw: object) -> None:
        self.clock = [0.0]
        self.pods = MemPods(self.clock)
        self.kubelet = MemKubelet() if kubelet else None
        self.marker = MemMarker(self.pods)
        self.confirm = Confirmations(self.marker, self.kubelet, self.pods, window_s=2.0, poll_s=0.01)  # type: ignore[arg-type]
        self.allocator = Allocator(
            NODE, inventory(), self.pods, kubelet=self.kubelet, confirmations=self.confirm,  # type: ignore[arg-type]
            clock=lambda: self.clock[0], **kw,  # type: ignore[arg-type]
        )  # fmt: skip

    def __enter__(self) -> World:
        self.confirm.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.confirm.stop()

    def marked(self, name: str, timeout_s: float = 5.0) -> GPUAllocation:
        deadline = time.monotonic() + timeout_s
        while f"team/{name}" not in self.marker.marks:
            assert time.monotonic() < deadline, f"team/{name} was not marked allocated"
            time.sleep(0.01)
        return self.marker.marks[f"team/{name}"]


def half(index: int = 1, uuid: str = GPU1, **kw: int) -> list[AssignedGPU]:
    return [AssignedGPU(index=index, uuid=uuid, milli=kw.get("milli", 500), memory_mib=kw.get("mib", 0))]


def whole(*gpus: tuple[int, str]) -> list[AssignedGPU]:
    return [AssignedGPU(index=i, uuid=u, milli=1000) for i, u in gpus]


def refused(call: object, *args: object) -> str:
    with pytest.raises(AllocationError) as err:
        call(*args)  # type: ignore[operator]
    return str(err.value)


# ---- what a placed pod is answered ----------------------------------------------------------------------
def test_a_fraction_gets_its_gpu_and_limits_and_is_marked_once_the_kubelet_holds_its_slice() -> None:
    with World() as w:
        w.pods.add(pod_obj("frac", [container("main", SLICE)], gpus=half()))
        w.kubelet.admit("frac", main={})  # type: ignore[union-attr]  # admitting: holds nothing yet
        (resp,) = w.allocator.allocate(SLICES, [[f"{GPU1}::2"]])
        expected = api_pb2.ContainerAllocateResponse(envs={
            "NVIDIA_VISIBLE_DEVICES": GPU1, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480M", "CUDA_DEVICE_MEMORY_LIMIT": "20480m",
            "CUDA_DEVICE_MEMORY_LIMIT_0": "20480m", "CUDA_DEVICE_SM_LIMIT": "50",
        })  # fmt: skip
        assert resp == expected
        time.sleep(0.1)
        assert not w.marker.marks  # the kubelet does not show the slice held yet: not confirmed
        w.kubelet.admit("frac", main={SLICE: [f"{GPU1}::2"]})  # type: ignore[union-attr]
        assert w.marked("frac").gpus == [AllocatedGPU(index=1, uuid=GPU1)]


def test_a_memory_request_uses_its_mib_and_two_devices_are_renumbered() -> None:
    with World(kubelet=False) as w:
        w.pods.add(pod_obj("mem", [container("main", SLICE)], gpus=half(0, GPU0, milli=100, mib=8192)))
        (resp,) = w.allocator.allocate(SLICES, [[f"{GPU0}::0"]])
        assert resp.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M"
        assert resp.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "10"
        two = [AssignedGPU(index=0, uuid=GPU0, milli=250), AssignedGPU(index=1, uuid=GPU1, milli=250)]
        w.pods.add(pod_obj("two", [container("main", SLICE, 2)], gpus=two))
        (resp,) = w.allocator.allocate(SLICES, [[f"{GPU0}::1", f"{GPU1}::1"]])
        assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == f"{GPU0},{GPU1}"
        assert resp.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M,1=10240M"
        assert resp.envs["CUDA_DEVICE_MEMORY_LIMIT"] == "10240m"  # the smaller, for runtimes with one limit


def test_every_container_of_a_placed_pod_is_answered_init_containers_reused() -> None:
    """The kubelet calls Allocate per container, init containers first: a plain init container's GPU is
    reused by the app container (same IDs, same answer); a sidecar runs beside the app container, each on
    its own GPU. The pod is marked once the last has been answered and the kubelet shows what it holds."""
    with World() as w:
        init = [container("setup", WHOLE), container("sidecar", WHOLE, restartPolicy="Always")]
        w.pods.add(pod_obj("staged", [container("main", WHOLE)], init=init, gpus=whole((0, GPU0), (1, GPU1))))
        w.kubelet.admit("staged", sidecar={}, main={})  # type: ignore[union-attr]
        answers = [w.allocator.allocate(WHOLES, [[d]])[0].envs["NVIDIA_VISIBLE_DEVICES"]
                   for d in (GPU0, GPU1, GPU0)]  # fmt: skip
        assert answers == [GPU0, GPU1, GPU0]
        w.kubelet.admit("staged", sidecar={WHOLE: [GPU1]}, main={WHOLE: [GPU0]})  # type: ignore[union-attr]
        assert [g.uuid for g in w.marked("staged").gpus] == [GPU0, GPU1]
        # Served whole: the next Allocate for whole GPUs is not for it.
        assert "no pod on node node-a waits for nvidia.com/gpu" in refused(
            w.allocator.allocate, WHOLES, [[GPU1]]
        )


def test_a_whole_gpu_the_scheduler_did_not_assign_is_refused() -> None:
    with World(kubelet=False) as w:
        w.pods.add(pod_obj("w", [container("main", WHOLE)], gpus=whole((0, GPU0))))
        why = refused(w.allocator.allocate, WHOLES, [[GPU1]])
        assert why == f"the kubelet offered GPU {GPU1} to pod team/w, which the scheduler assigned {GPU0}"


@pytest.mark.parametrize(
    ("obj", "resource", "ids", "why"),
    [
        (pod_obj("far", [container("main", SLICE)], gpus=half(), assigned_node="node-b"), SLICES,
         [f"{GPU1}::0"], "pod team/far is assigned to node node-b but this is node node-a"),
        (pod_obj("two", [container("main", SLICE)], gpus=half() + half(0, GPU0)), SLICES, [f"{GPU1}::0"],
         "pod team/two asks for 1 tessera.dev/gpu-slice but the scheduler assigned it 2 GPU(s)"),
        (pod_obj("kind", [container("main", SLICE)], gpus=whole((0, GPU0))), SLICES, [f"{GPU0}::0"],
         "pod team/kind was assigned whole GPUs but its container asks for tessera.dev/gpu-slice"),
        (pod_obj("kind2", [container("main", WHOLE)], gpus=half()), WHOLES, [GPU1],
         "pod team/kind2 was assigned a GPU fraction but its container asks for whole GPUs"),
        (pod_obj("ghost", [container("main", SLICE)], gpus=half(5, "GPU-nope")), SLICES, [f"{GPU1}::0"],
         "pod team/ghost is assigned GPU GPU-nope, which node node-a does not have"),
        (pod_obj("big", [container("main", SLICE)], gpus=half(1, GPU1, mib=50000)), SLICES, [f"{GPU1}::0"],
         f"pod team/big is assigned 50000 MiB on GPU {GPU1}, which has 40960 MiB"),
        (pod_obj("theirs", [container("main", SLICE)]), SLICES, [f"{GPU1}::0"],
         "pod team/theirs asks for tessera.dev/gpu-slice but was not placed by the Tessera scheduler"),
    ],
)  # fmt: skip
def test_mismatches_fail_with_a_readable_message(
    obj: dict, resource: Resource, ids: list[str], why: str
) -> None:
    w = World(kubelet=False)
    w.pods.add(obj)
    assert why in refused(w.allocator.allocate, resource, [ids])


def test_an_unhealthy_gpu_and_a_malformed_assignment_are_refused() -> None:
    w = World(kubelet=False)
    w.pods.add(pod_obj("sick", [container("main", SLICE)], gpus=half()))
    w.allocator._inventory.set_health(1, False, "Xid 79")
    assert f"GPU {GPU1}, which is unhealthy (Xid 79)" in refused(
        w.allocator.allocate, SLICES, [[f"{GPU1}::0"]]
    )
    w.pods.remove("uid-sick")
    bad = pod_obj("bad", [container("main", SLICE)])
    bad["metadata"]["annotations"]["tessera.dev/gpu-assignment"] = "{not json"
    w.pods.add(bad)
    assert "annotation tessera.dev/gpu-assignment is malformed" in refused(
        w.allocator.allocate, SLICES, [[f"{GPU1}::0"]]
    )


# ---- which pod: the watch and the kubelet's list --------------------------------------------------------
def test_a_pod_the_watch_shows_late_is_waited_for_and_none_fails_after_pod_wait() -> None:
    w = World(kubelet=False, pod_wait_s=3.0)
    w.pods.arriving.append(pod_obj("late", [container("main", SLICE)], gpus=half()))
    (resp,) = w.allocator.allocate(SLICES, [[f"{GPU1}::0"]])
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == GPU1 and 0 < w.clock[0] < 3.0
    why = refused(w.allocator.allocate, SLICES, [[f"{GPU1}::1"]])
    assert why.startswith("no pod on node node-a waits for tessera.dev/gpu-slice") and w.clock[0] >= 3.0


def test_the_kubelets_list_tells_which_of_two_pods_it_admits() -> None:
    """Two pods of one gang bound to the node together, both waiting: the kubelet admits one at a time,
    and lists the one it admits holding nothing yet, the other not at all (it has not reached it)."""
    w = World()
    w.pods.add(pod_obj("g-0", [container("main", SLICE)], gpus=half(0, GPU0)))
    w.pods.add(pod_obj("g-1", [container("main", SLICE)], gpus=half(1, GPU1)))
    w.kubelet.admit("g-1", main={})  # type: ignore[union-attr]
    assert w.allocator.allocate(SLICES, [[f"{GPU0}::0"]])[0].envs["NVIDIA_VISIBLE_DEVICES"] == GPU1
    w.kubelet.admit("g-1", main={SLICE: [f"{GPU0}::0"]})  # type: ignore[union-attr]
    w.kubelet.admit("g-0", main={})  # type: ignore[union-attr]
    assert w.allocator.allocate(SLICES, [[f"{GPU0}::1"]])[0].envs["NVIDIA_VISIBLE_DEVICES"] == GPU0


def test_without_the_kubelets_list_two_waiting_pods_are_refused_not_guessed() -> None:
    w = World(kubelet=False)
    w.pods.add(pod_obj("g-0", [container("main", SLICE)], gpus=half(0, GPU0)))
    w.pods.add(pod_obj("g-1", [container("main", SLICE)], gpus=half(1, GPU1)))
    why = refused(w.allocator.allocate, SLICES, [[f"{GPU0}::0"]])
    assert "cannot tell which pod the kubelet is admitting" in why and "team/g-0, team/g-1" in why


def test_a_pod_another_scheduler_placed_gets_a_gpu_nobody_uses() -> None:
    """As NVIDIA's plugin would: the GPU the kubelet chose (GetPreferredAllocation steers it to a free one),
    refused when a pod Tessera placed was assigned it or another pod holds it."""
    with World() as w:
        w.pods.add(pod_obj("ours", [container("main", SLICE)], gpus=half(0, GPU0)))
        w.kubelet.admit("ours", main={SLICE: [f"{GPU0}::0"]})  # type: ignore[union-attr]
        w.pods.add(pod_obj("theirs", [container("main", WHOLE)]))
        w.kubelet.admit("theirs", main={})  # type: ignore[union-attr]
        assert w.allocator.preferred(WHOLES, [GPU0, GPU1], [], 1) == [GPU1]
        why = refused(w.allocator.allocate, WHOLES, [[GPU0]])
        assert f"offered {GPU0}, which the scheduler assigned to pod team/ours" in why
        (resp,) = w.allocator.allocate(WHOLES, [[GPU1]])
        assert resp == api_pb2.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": GPU1})
        w.kubelet.admit("theirs", main={WHOLE: [GPU1]})  # type: ignore[union-attr]
        assert w.marked("theirs").gpus == [AllocatedGPU(index=1, uuid=GPU1)]  # the scheduler charges GPU 1


def test_preferred_allocation_steers_to_the_assigned_gpu() -> None:
    w = World(kubelet=False)
    w.pods.add(pod_obj("frac", [container("main", SLICE)], gpus=half()))
    available = [f"{GPU0}::0", f"{GPU0}::1", f"{GPU1}::3", f"{GPU1}::1"]
    assert w.allocator.preferred(SLICES, available, [], 1) == [f"{GPU1}::3"]
    assert w.allocator.preferred(SLICES, available, [f"{GPU0}::1"], 1) == [f"{GPU0}::1"]  # must include wins


# ---- PreStartContainer ------------------------------------------------------------------------------------
def test_prestart_lets_start_only_the_pod_the_devices_were_answered_for() -> None:
    """The kubelet gave `intruder` the slice Allocate answered with a's GPU (a pod Tessera did not place,
    admitted while the plugin thought it was a): its container must not start."""
    w = World()
    w.pods.add(pod_obj("a", [container("main", SLICE)], gpus=half()))
    w.kubelet.admit("a", main={})  # type: ignore[union-attr]
    w.allocator.allocate(SLICES, [[f"{GPU1}::0"]])
    w.pods.add(pod_obj("intruder", [container("main", SLICE)]))
    w.kubelet.admit("intruder", main={SLICE: [f"{GPU1}::0"]})  # type: ignore[union-attr]
    why = refused(w.allocator.pre_start, SLICES, [f"{GPU1}::0"])
    assert why == (
        f"the kubelet gave devices {GPU1}::0 to pod team/intruder, but Allocate answered them with the GPUs "
        "of pod team/a: team/intruder's container must not start on another pod's GPUs (delete the pod to "
        "have it admitted again)"
    )


def test_prestart_confirms_and_marks_the_pod_and_after_a_plugin_restart_checks_the_assignment() -> None:
    with World() as w:
        w.pods.add(pod_obj("a", [container("main", SLICE)], gpus=half()))
        w.kubelet.admit("a", main={})  # type: ignore[union-attr]
        w.allocator.allocate(SLICES, [[f"{GPU1}::0"]])
        w.kubelet.admit("a", main={SLICE: [f"{GPU1}::0"]})  # type: ignore[union-attr]
        w.allocator.pre_start(SLICES, [f"{GPU1}::0"])
        assert w.marked("a").gpus == [AllocatedGPU(index=1, uuid=GPU1)]
    restarted = World()  # nothing answered by this process: the pod's assignment says what it may hold
    restarted.pods.add(pod_obj("b", [container("main", SLICE)], gpus=half(0, GPU0)))
    restarted.kubelet.admit("b", main={SLICE: [f"{GPU1}::5"]})  # type: ignore[union-attr]
    why = refused(restarted.allocator.pre_start, SLICES, [f"{GPU1}::5"])
    assert why == f"pod team/b holds devices of GPU {GPU1}, but the scheduler assigned it {GPU0}"


def test_prestart_fails_while_the_kubelets_list_cannot_be_read() -> None:
    w = World()
    w.kubelet.down = True  # type: ignore[union-attr]
    assert "connection refused" in refused(w.allocator.pre_start, SLICES, [f"{GPU1}::0"])


def test_standalone_and_mps_pipe_dir() -> None:
    standalone = Allocator(NODE, inventory(), None)
    assert "no Kubernetes API configured" in refused(standalone.allocate, SLICES, [[f"{GPU1}::0"]])
    w = World(kubelet=False, mps_pipe_dir="/run/nvidia/mps")
    w.pods.add(pod_obj("frac", [container("main", SLICE)], gpus=half()))
    (resp,) = w.allocator.allocate(SLICES, [[f"{GPU1}::0"]])
    assert resp.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/run/nvidia/mps"
    assert [(m.container_path, m.host_path, m.read_only) for m in resp.mounts] == [
        ("/run/nvidia/mps", "/run/nvidia/mps", False)
    ]
