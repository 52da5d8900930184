"""Objects that are used, but not as their author meant, are warned about once each: a queue whose parent
is missing, pods naming a missing PodGroup, a node whose GPU memory had to be assumed. A node whose GPU
memory cannot be told is left out, with the label to set."""

from __future__ import annotations

import pytest

from scheduler.model.gpu_memory import memory_from_product
from scheduler.model.parse import parse_node
from tests.framework.helpers import A100, cluster, node, phase, pod, queue, run


def test_a_queue_with_a_missing_parent_is_a_root_with_a_warning() -> None:
    sim, sched = cluster(
        [
            node("n1", A100, 4, 32, 256),
            queue("team", "nowhere", 2),
            pod("p", "team", arrival_s=0, duration_s=60),
        ]
    )
    run(sim, sched, cycles=3)
    assert phase(sim, "team/p") == "Running"
    assert sim.warnings == [
        "queue team: parent queue nowhere does not exist; it is scheduled as a top-level queue"
    ]
    assert sched.warnings == {("Queue", None, "team", "QueueMisconfigured"): sim.warnings[0]}


def test_pods_naming_a_missing_podgroup_are_warned_once_per_group() -> None:
    pods = [
        pod(
            f"w{i}",
            "team",
            arrival_s=0,
            duration_s=60,
            gpus=1,
            annotations={"tessera.dev/pod-group": "ghost"},
        )
        for i in range(3)
    ]
    sim, sched = cluster([node("n1", A100, 1, 32, 256), queue("team", None, 4), *pods])
    run(sim, sched, cycles=3)
    lines = [w for w in sim.warnings if "PodGroup" in w]
    assert len(lines) == 1 and "PodGroup team/ghost does not exist" in lines[0]
    # The three wait (a gang of 3 GPUs on a 1-GPU node): each carries the warning while it waits.
    assert {k[2] for k in sched.warnings if k[3] == "PodGroupNotFound"} == {"w0", "w1", "w2"}
    from scheduler.ui import build_view

    assert lines[0] in build_view(sched).warnings  # and the dashboard lists it once


def test_a_node_without_the_memory_label_takes_it_from_a_known_product() -> None:
    n = node("l4", ("NVIDIA-L4", 23034), 2, 16, 64)
    del n["metadata"]["labels"]["nvidia.com/gpu.memory"]
    info = parse_node(n)
    assert info.gpu_memory_mib == 23034 and info.warning and "nvidia.com/gpu.memory" in info.warning
    sim, sched = cluster(
        [
            n,
            queue("team", None, 2),
            pod("p", "team", arrival_s=0, duration_s=60, annotations={"gpu-memory": "10000"}),
        ]
    )
    run(sim, sched, cycles=2)
    assert phase(sim, "team/p") == "Running"
    assert any("assuming 23034 MiB per GPU" in w for w in sim.warnings)


def test_a_node_whose_gpu_memory_cannot_be_told_says_which_label_to_set() -> None:
    """Kept, but its GPUs take no GPU pod until its node agent's GPUNodeReport or a label tells their memory."""
    n = node("odd", ("Mystery-Accelerator", 1), 2, 16, 64)
    del n["metadata"]["labels"]["nvidia.com/gpu.memory"]
    assert parse_node(n).gpu_memory_mib == 0
    sim, sched = cluster(
        [
            n,
            queue("team", None, 2),
            pod("p", "team", arrival_s=0, duration_s=60, annotations={"gpu-memory": "100"}),
        ]
    )
    run(sim, sched, cycles=2)
    assert phase(sim, "team/p") == "Pending"
    (error,) = [w for w in sched.warnings.values() if "GPUs of unknown memory" in w]
    assert "its product 'Mystery-Accelerator' names no known model" in error
    assert error.endswith("label it nvidia.com/gpu.memory=<MiB>")


@pytest.mark.parametrize(
    ("product", "mib"),
    [
        ("NVIDIA-A100-SXM4-40GB", 40960),
        ("NVIDIA-A100-80GB-PCIe", 81920),
        ("NVIDIA-H100-80GB-HBM3", 81920),
        ("Tesla-V100-SXM2-32GB", 32768),
        ("Tesla-T4", 15360),
        ("NVIDIA-L4", 23034),
        ("NVIDIA-A10G", 23028),
        ("NVIDIA-L40S", 46068),
        ("NVIDIA-H200", 143771),
        ("NVIDIA-A100-SXM4", None),  # sold in two sizes: cannot tell
        ("", None),
    ],
)
def test_gpu_memory_from_the_product_name(product: str, mib: int | None) -> None:
    assert memory_from_product(product) == mib
