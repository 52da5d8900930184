"""Nodes that change under running pods (issue 14): deleted and re-created while their pods run (kubectl
delete node, then the kubelet registers it again), or a GPU count that dips (allocatable 8 -> 7 with 8
pods running) and comes back. The arrays always equal the pods that run there; nothing is over-committed,
the cycle never fails, and no GPU is left unusable once its pods are gone."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from scheduler.api.keys import GPU_MEMORY_LABEL, SIM_DURATION, WHOLE_GPU_RESOURCE
from scheduler.cycle import Scheduler
from scheduler.sim.cluster import DEFAULT_GRACE_S, SIM_RECREATE, SimCluster
from tests.cache.test_gpu_identity import agent_report
from tests.framework.helpers import (
    A100,
    assert_arrays_match_world,
    cluster,
    node,
    phase,
    pod,
    run,
    world_gpu_use,
)


def _forever(name: str, **kw: object) -> dict:
    p = pod(name, "default", arrival_s=0, duration_s=0, **kw)  # type: ignore[arg-type]
    p["metadata"]["annotations"].pop(SIM_DURATION)
    p["metadata"]["annotations"][SIM_RECREATE] = "false"
    return p


def _with_gpus(obj: dict, gpus: int) -> dict:
    out = copy.deepcopy(obj)
    out["status"]["capacity"][WHOLE_GPU_RESOURCE] = str(gpus)
    return out


def _delete_pod(sim: SimCluster, sched: Scheduler, key: str) -> None:
    """Delete the pod gracefully: it is gone after its grace period (DEFAULT_GRACE_S)."""
    uid = sim.pods[key].obj["metadata"]["uid"]
    sim.evict(sched.cache.pods[uid], action="test", message="deleted by the user")


def test_node_deleted_and_recreated_under_running_pods_is_not_overcommitted() -> None:
    """The issue's case: the re-registered node started empty and a second 0.75 pod landed on the GPU
    the first one still uses."""
    n0 = node("n0", A100, 1, 64, 512)
    sim, sched = cluster([n0])
    sim.submit_pod(_forever("first", annotations={"gpu-fraction": "0.75"}))
    run(sim, sched)
    assert phase(sim, "default/first") == "Running"
    sim.delete_object("Node", n0)
    run(sim, sched)
    sim.add_object("Node", copy.deepcopy(n0))
    sim.submit_pod(_forever("second", annotations={"gpu-fraction": "0.75"}))
    run(sim, sched, cycles=3)
    assert world_gpu_use(sim)[("n0", 0)] == (750, 30720)
    assert phase(sim, "default/second") == "Pending"
    assert_arrays_match_world(sim, sched)


def test_a_deleted_node_takes_no_pod_and_its_pods_stay_charged() -> None:
    n0, n1 = node("n0", A100, 1, 64, 512), node("n1", A100, 1, 64, 512)
    sim, sched = cluster([n0, n1])
    sim.submit_pod(_forever("first", gpus=1))
    run(sim, sched)
    (where,) = {name for name, _ in world_gpu_use(sim)}
    other = "n1" if where == "n0" else "n0"
    sim.delete_object("Node", n0 if where == "n0" else n1)
    sim.submit_pod(_forever("second", gpus=1))
    sim.submit_pod(_forever("third", gpus=1))
    run(sim, sched, cycles=2)
    assert sorted(name for name, _ in world_gpu_use(sim)) == sorted([where, other])
    assert sched.last_session is not None
    assert sched.last_session.tree.nodes["default"].allocated.gpu == 2.0  # the gone node's pod counts
    _delete_pod(sim, sched, "default/first")  # its pods are deleted too (the pod GC): the row goes
    run(sim, sched, cycles=2, dt=DEFAULT_GRACE_S)
    assert sched.cache.state.row_of(where) is None
    assert_arrays_match_world(sim, sched)


def test_gpu_count_dip_and_return_with_every_gpu_busy() -> None:
    """Allocatable 8 -> 7 with 8 pods running: the cycle goes on, GPU 7 takes no new pod while it is
    gone, is free again once its pod leaves, and everything is consistent when the count comes back."""
    n0 = node("n0", A100, 8, 64, 512)
    sim, sched = cluster([n0])
    for i in range(8):
        sim.submit_pod(_forever(f"p{i}", gpus=1))
    run(sim, sched)
    use = world_gpu_use(sim)
    assert len(use) == 8
    sim.update_object("Node", _with_gpus(n0, 7))
    run(sim, sched, cycles=2)
    assert_arrays_match_world(sim, sched)
    on_seven = next(k for k, r in sim.pods.items() if '"index":7' in r.obj["metadata"]["annotations"]
                    .get("tessera.dev/gpu-assignment", "").replace(" ", ""))  # fmt: skip
    _delete_pod(sim, sched, on_seven)
    sim.submit_pod(_forever("late", gpus=1))
    run(sim, sched, cycles=2, dt=DEFAULT_GRACE_S)
    assert phase(sim, "default/late") == "Pending"  # GPU 7 is gone: nothing may go there
    assert_arrays_match_world(sim, sched)
    sim.update_object("Node", _with_gpus(n0, 8))
    run(sim, sched, cycles=2)
    assert phase(sim, "default/late") == "Running"
    assert_arrays_match_world(sim, sched)
    row = sched.cache.state.row_of("n0")
    assert row is not None and list(map(int, sched.cache.state.free_milli[row, :8])) == [0] * 8


def test_gpu_count_comes_back_while_the_pod_on_the_missing_gpu_still_runs() -> None:
    n0 = node("n0", A100, 8, 64, 512)
    sim, sched = cluster([n0])
    for i in range(8):
        sim.submit_pod(_forever(f"p{i}", gpus=1))
    run(sim, sched)
    sim.update_object("Node", _with_gpus(n0, 7))
    run(sim, sched)
    sim.update_object("Node", _with_gpus(n0, 8))
    run(sim, sched)
    assert_arrays_match_world(sim, sched)
    for key in sorted(sim.pods):
        _delete_pod(sim, sched, key)
    run(sim, sched, dt=DEFAULT_GRACE_S)
    row = sched.cache.state.row_of("n0")
    assert row is not None and list(map(int, sched.cache.state.free_milli[row, :8])) == [1000] * 8
    assert all(bool(h) for h in sched.cache.state.healthy[row, :8])


def test_preemption_tried_on_a_gpu_that_left_the_count_never_fails_the_cycle() -> None:
    """Victims are evicted on trial and rolled back: one on a GPU the node no longer counts must find its
    GPU again on the roll-back (it made the whole cycle fail, every cycle)."""
    n0 = node("n0", A100, 2, 64, 512)
    sim, sched = cluster([n0])
    for i in range(2):
        sim.submit_pod(_forever(f"train{i}", gpus=1))
    run(sim, sched)
    sim.update_object("Node", _with_gpus(n0, 1))
    sim.submit_pod(_forever("urgent", gpus=1, priority_class="inference"))
    for _ in range(3):
        run(sim, sched, dt=DEFAULT_GRACE_S)  # never raises; the victim terminates in its grace period
        assert_arrays_match_world(sim, sched)
    assert phase(sim, "default/urgent") == "Running"
    assert world_gpu_use(sim)[("n0", 0)] == (1000, 40960)


def _memory_label(obj: dict, value: str) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"]["labels"][GPU_MEMORY_LABEL] = value
    return out


@pytest.mark.parametrize(
    ("hostile", "said"),
    [
        (lambda n: _memory_label(n, "9" * 20), "9" * 20),  # the label
        (lambda n: _with_gpus(n, 2**31), "nvidia.com/gpu"),  # the GPU count
        (lambda n: _memory_label(n, "٤٠٩٦٠"), "not MiB"),  # digits Kubernetes users never write
    ],
    ids=["memory-label", "gpu-count", "non-ascii-digits"],
)
def test_a_node_updated_to_hostile_values_takes_no_new_pod_and_keeps_its_running_ones(
    hostile: Callable[[dict], dict], said: str
) -> None:
    """Issue 14: a Node updated to values no GPU has kept its old parsed version, still taking pods. It now
    takes no new pod, says why (a Node warning), keeps its running pods where they are, stays so when its
    agent's GPUNodeReport arrives (a report rewrites the node from its last readable version), and takes
    pods again once it is fixed."""
    n0 = node("n0", A100, 2, 64, 512)
    sim, sched = cluster([n0])
    sim.submit_pod(_forever("a", annotations={"gpu-fraction": "0.5"}))
    run(sim, sched)
    assert phase(sim, "default/a") == "Running"
    sim.update_object("Node", hostile(n0))
    sim.submit_pod(_forever("b", annotations={"gpu-fraction": "0.5"}))
    run(sim, sched, cycles=2)
    assert phase(sim, "default/a") == "Running" and phase(sim, "default/b") == "Pending"
    warning = sched.warnings.get(("Node", None, "n0", "NodeUnusable"), "")
    assert "node n0 is unschedulable for Tessera" in warning and said in warning, warning
    assert_arrays_match_world(sim, sched)
    sim.add_object("GPUNodeReport", agent_report("n0", "2xA100-40GB"))
    run(sim, sched, cycles=2)
    assert phase(sim, "default/b") == "Pending"
    sim.update_object("Node", copy.deepcopy(n0))  # fixed
    run(sim, sched, cycles=2)
    assert phase(sim, "default/b") == "Running"
    assert ("Node", None, "n0", "NodeUnusable") not in sched.warnings
    assert_arrays_match_world(sim, sched)
