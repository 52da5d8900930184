"""Usage is charged where the pod really is, whatever its labels say now (issue 14, quota escape).

A running pod relabelled to a queue that does not exist (or a deleted queue's pods) stays charged to the
queue it was admitted to (or to `default`), so limits still hold and the queue owed GPUs can reclaim them.
"""

from __future__ import annotations

import copy

from scheduler.api.keys import QUEUE_LABEL
from scheduler.sim.cluster import DEFAULT_GRACE_S, SimCluster
from tests.framework.helpers import A100, assert_arrays_match_world, cluster, node, phase, pod, queue, run


def _relabel(sim: SimCluster, key: str, queue_name: str) -> None:
    obj = copy.deepcopy(sim.pods[key].obj)
    obj["metadata"].setdefault("labels", {})[QUEUE_LABEL] = queue_name
    sim.update_object("Pod", obj)


def _running(sim: SimCluster) -> list[str]:
    return sorted(k for k in sim.pods if phase(sim, k) == "Running")


def test_relabelling_running_pods_to_a_missing_queue_never_escapes_the_limit() -> None:
    """The issue's case: a queue with GPU limit 1 got 4 GPUs by relabelling each running pod away."""
    sim, sched = cluster([node("n0", A100, 8, 64, 512), queue("small", None, 1, limit=1)])
    for i in range(4):
        sim.submit_pod(pod(f"p{i}", "small", arrival_s=0, duration_s=10_000, gpus=1))
    for _ in range(6):
        run(sim, sched)
        for key in _running(sim):
            _relabel(sim, key, "missing")
    run(sim, sched, cycles=2)
    assert len(_running(sim)) == 1, _running(sim)
    assert sched.last_session is not None
    assert sched.last_session.tree.nodes["small"].allocated.gpu == 1.0
    waiting = sim.pods["small/p1"].reason
    assert waiting is not None and waiting[0] == "OverLimit"


def test_a_relabelled_pod_stays_reclaimable() -> None:
    """Queue `owed` (quota 4) waits; `greedy` (quota 0) holds the 4 GPUs with pods relabelled to a queue
    that does not exist: they are still greedy's, over its fair share, and reclaimed for owed."""
    sim, sched = cluster([
        node("n0", A100, 4, 64, 512), queue("greedy", None, 0), queue("owed", None, 4),
    ])  # fmt: skip
    for i in range(4):
        sim.submit_pod(pod(f"g{i}", "greedy", arrival_s=0, duration_s=10_000, gpus=1))
    run(sim, sched)
    assert len(_running(sim)) == 4
    for key in _running(sim):
        _relabel(sim, key, "missing")
    sim.submit_pod(pod("w", "owed", arrival_s=0, duration_s=10_000, gpus=2))
    run(sim, sched, cycles=4, dt=DEFAULT_GRACE_S)  # the victims terminate within their grace period
    assert phase(sim, "owed/w") == "Running"


def test_a_deleted_queues_running_pods_are_charged_to_default() -> None:
    """A queue deleted under running pods: their usage moves to `default` (never to nobody), so default's
    limit sees them."""
    sim, sched = cluster([
        node("n0", A100, 4, 64, 512), queue("gone", None, 4), queue("default", None, 0, limit=2),
    ])  # fmt: skip
    for i in range(2):
        sim.submit_pod(pod(f"a{i}", "gone", arrival_s=0, duration_s=10_000, gpus=1))
    run(sim, sched)
    assert len(_running(sim)) == 2
    sim.delete_object("Queue", queue("gone", None, 4))
    for i in range(2):
        sim.submit_pod(pod(f"d{i}", "default", arrival_s=0, duration_s=10_000, gpus=1))
    run(sim, sched, cycles=3)
    assert sched.last_session is not None
    assert sched.last_session.tree.nodes["default"].allocated.gpu == 2.0
    assert _running(sim) == ["gone/a0", "gone/a1"]


def test_a_running_pod_whose_gpu_annotation_is_edited_keeps_what_it_was_bound_with() -> None:
    """A whole-GPU pod given `gpu-fraction: nan` while it runs is still a whole-GPU pod: it is not moved as
    if it asked for no GPU (consolidation evicted it to make room it could not really make)."""
    sim, sched = cluster([node("n0", A100, 2, 64, 512)])
    sim.submit_pod(pod("whole", "default", arrival_s=0, duration_s=10_000, gpus=1))
    sim.submit_pod(
        pod("tenth", "default", arrival_s=0, duration_s=10_000, annotations={"gpu-fraction": "0.1"})
    )
    run(sim, sched)
    obj = copy.deepcopy(sim.pods["default/whole"].obj)
    obj["metadata"]["annotations"]["gpu-fraction"] = "nan"
    sim.update_object("Pod", obj)
    two = {"gpu-fraction": "0.1", "gpu-fraction-num-devices": "2"}
    sim.submit_pod(pod("both", "default", arrival_s=0, duration_s=10_000, annotations=two))
    run(sim, sched, cycles=3)
    assert phase(sim, "default/whole") == "Running" and sim.pods["default/whole"].evictions == 0
    assert phase(sim, "default/both") == "Pending"
    assert_arrays_match_world(sim, sched)
