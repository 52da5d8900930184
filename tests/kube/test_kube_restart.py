"""A restarted scheduler forgets nothing (issue 27, finding 1), on the real kube-apiserver.

The scheduler is killed with fractional, whole-GPU and gang pods running and a fresh one started, with
and without GPU Feature Discovery labels on the nodes (without them a GPU's memory comes only from its
node's GPUNodeReport, which may reach the new scheduler after the pods). The report is deleted while the
scheduler is down and comes back once the new one runs, so the pods are always seen first: before the fix
every hold raised an over-commit error against GPUs of 0 MiB, was dropped and never retried, and the new
scheduler put fresh 0.6 pods onto GPUs already holding 0.6 and showed the queue's usage as 0.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.controlplane.scene import Scene, runner_config, wait_until
from tests.kube.helpers import pod_body

pytestmark = pytest.mark.apiserver

GIB80 = 81920
QUEUE = "team"


def _report(scene: Scene, node: str) -> None:
    gpus = [{"index": i, "uuid": f"GPU-{node}-{i}", "model": "NVIDIA-H100-80GB-HBM3", "memoryTotalMiB": GIB80,
             "health": "Healthy"} for i in range(2)]  # fmt: skip
    scene.gpu_report(node, gpus)


def _pod(
    name: str, *, fraction: str | None = None, gpus: int = 0, group: str | None = None
) -> dict[str, Any]:
    annotations = {"gpu-fraction": fraction} if fraction else {}
    if group:
        annotations["tessera.dev/pod-group"] = group
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else None
    return pod_body(name, annotations=annotations, labels={"tessera.dev/queue": QUEUE}, limits=limits)


def _allocated(scene: Scene) -> dict[str, float]:
    status = scene.get("queues", QUEUE, namespaced=False).get("status") or {}
    return dict(status.get("allocated") or {})


@pytest.mark.parametrize("gpu_labels", [True, False], ids=["gpu-labels", "memory-from-report-only"])
def test_a_restart_keeps_every_running_pods_hold(scene: Scene, gpu_labels: bool) -> None:
    for node in ("gpu-1", "gpu-2"):
        scene.node(node, gpus=2, gpu_labels=gpu_labels)
        _report(scene, node)
    scene.queue(QUEUE, {"resources": {"gpu": {"quota": 4, "limit": -1}}})
    scene.podgroup("gang", {"minMember": 2, "queue": QUEUE})
    kubelet = scene.kubelet()
    first = scene.scheduler(runner_config("sched-a"))
    # Three GPUs get 0.6 each, the fourth the whole pod, the gang 0.4 + 0.4 beside two of the 0.6 pods:
    # afterwards no GPU has room for another 0.6 or a whole GPU.
    waves = [
        {f"frac-{i}": _pod(f"frac-{i}", fraction="0.6") for i in range(3)},
        {"whole": _pod("whole", gpus=1)},
        {f"gang-{i}": _pod(f"gang-{i}", fraction="0.4", group="gang") for i in range(2)},
    ]
    running: dict[str, dict[str, Any]] = {}
    for wave in waves:
        running.update(wave)
        for body in wave.values():
            scene.create_pod(body)
        wait_until(lambda: len(kubelet.allocated) == len(running), timeout=30)
    before_use = scene.gpu_use()
    assert all(milli <= 1000 for milli in before_use.values()), before_use
    wait_until(lambda: _allocated(scene).get("gpu") == pytest.approx(3.6), timeout=15)
    before = _allocated(scene)
    first.stop()

    # Down: the node agents' reports go too (an agent upgrade), so the new scheduler sees the pods first.
    for node in ("gpu-1", "gpu-2"):
        scene.custom.delete_cluster_custom_object(
            "scheduling.tessera.dev", "v1alpha1", "gpunodereports", node
        )
    second = scene.scheduler(runner_config("sched-b"))
    wait_until(lambda: second.cycles >= 3)
    for node in ("gpu-1", "gpu-2"):
        _report(scene, node)
    for i in range(4):  # room for none of them: every GPU holds 0.6, or 0.8, or a whole pod
        scene.create_pod(_pod(f"new-{i}", fraction="0.6"))
    scene.create_pod(_pod("new-whole", gpus=1))
    cycles = second.cycles
    wait_until(lambda: second.cycles >= cycles + 15, timeout=30)

    use = scene.gpu_use()
    assert all(milli <= 1000 for milli in use.values()), use  # never two 0.6 pods on one GPU
    assert set(scene.bound()) == set(running), sorted(scene.bound())
    assert use == before_use
    wait_until(lambda: _allocated(scene) == before, timeout=15)
    pending = [p for p in scene.pods() if not p["spec"].get("nodeName")]
    assert len(pending) == 5 and all(p["status"].get("conditions") for p in pending)


def test_a_restart_charges_the_pods_of_a_node_deleted_while_it_was_down(scene: Scene) -> None:
    """`kubectl delete node` while the scheduler is down, its pods still running (the pod garbage collector
    deletes them some 40 s later): the new scheduler never sees the node, yet the queue's limit counts
    them, so a pod of the same queue waits rather than passing the limit on the node that is left."""
    for node in ("gpu-1", "gpu-2"):
        scene.node(node, gpus=2)
    scene.queue(QUEUE, {"resources": {"gpu": {"quota": 2, "limit": 2}}})
    kubelet = scene.kubelet()
    first = scene.scheduler(runner_config("sched-a"))
    scene.create_pod(_pod("two", gpus=2))
    wait_until(lambda: len(kubelet.allocated) == 1, timeout=30)
    wait_until(lambda: _allocated(scene).get("gpu") == pytest.approx(2), timeout=15)
    first.stop()
    where = scene.pod("two")["spec"]["nodeName"]
    scene.core.delete_node(where)

    second = scene.scheduler(runner_config("sched-b"))
    scene.create_pod(_pod("one", gpus=1))
    wait_until(lambda: second.cycles >= 5, timeout=30)
    assert not scene.pod("one")["spec"].get("nodeName")  # the node left has room, the queue's limit none
    assert _allocated(scene).get("gpu") == pytest.approx(2)
