"""A scheduler started afresh (a restart, a failover) holds what every running pod holds, whatever it sees
first (issue 27, finding 1): the pods before their node's GPUNodeReport, on nodes without GPU Feature
Discovery's memory label, GPU memory filled in when the report comes; a GPU whose running pods cannot all
be charged takes no new pod. The restart is `SimCluster.relist`: every object of the world as ADDED, in the
order given, to a new `Scheduler` (tests/kube/test_kube_restart.py does the same on the real API server).
"""

from __future__ import annotations

import json
from typing import Any

from scheduler.api.keys import GPU_ASSIGNMENT, GPU_FRACTION
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.sim.builtin import node, queue
from scheduler.sim.cluster import DEFAULT_GRACE_S, SimCluster
from tests.cache.test_gpu_identity import agent_report, unlabelled
from tests.framework.helpers import A100, assert_arrays_match_world, cluster, phase, pod, run

PODS_FIRST = ("Node", "PriorityClass", "Queue", "PodGroup", "Topology", "Pod", "GPUNodeReport")


def fraction(name: str, value: str) -> dict[str, Any]:
    return pod(name, "default", arrival_s=0, duration_s=1000, cpu="1", annotations={GPU_FRACTION: value})


def restart(sim: SimCluster, order: tuple[str, ...] = PODS_FIRST) -> Scheduler:
    sched = Scheduler(sim, SchedulerConfig(policy="binpack", backend="numpy"))
    sim.relist(order)  # type: ignore[arg-type]
    return sched


def _running_on_unlabelled_node() -> SimCluster:
    sim, sched = cluster([unlabelled("n1", 2), fraction("a", "0.6"), fraction("b", "0.6")])
    sim.add_object("GPUNodeReport", agent_report("n1", "2xA100-40GB"))
    run(sim, sched, cycles=3)
    assert phase(sim, "default/a") == phase(sim, "default/b") == "Running"
    return sim


def test_pods_seen_before_their_nodes_report_keep_their_shares() -> None:
    sim = _running_on_unlabelled_node()
    sched = restart(sim)  # pods, then the report, in one batch of events
    for i in range(2):
        sim.submit_pod(fraction(f"new-{i}", "0.6"))
    run(sim, sched, cycles=3)
    assert phase(sim, "default/new-0") == phase(sim, "default/new-1") == "Pending"  # each GPU has 0.4 left
    assert_arrays_match_world(sim, sched)
    state = sched.cache.state
    row = state.row_of("n1")
    assert [int(state.free_milli[row, j]) for j in range(2)] == [400, 400]
    assert [int(state.free_mib[row, j]) for j in range(2)] == [16384, 16384]  # 0.6 of 40 GiB each, held


def test_a_report_that_comes_cycles_later_fills_in_the_memory_of_held_shares() -> None:
    sim = _running_on_unlabelled_node()
    report = sim.objects["GPUNodeReport"]["n1"]
    sim.objects["GPUNodeReport"].clear()  # the agent restarts too: its report comes later
    sched = restart(sim)
    sim.submit_pod(fraction("new", "0.3"))
    run(sim, sched, cycles=2)
    usage = sched.cache.index.usage.by_queue()
    assert usage["default"][0] == 1200  # charged from the start, in milli
    assert phase(sim, "default/new") == "Pending"  # GPUs of unknown memory take no pod
    sim.add_object("GPUNodeReport", report)
    run(sim, sched, cycles=2)
    assert phase(sim, "default/new") == "Running"
    assert_arrays_match_world(sim, sched)
    state = sched.cache.state
    row = state.row_of("n1")
    held = sorted(int(state.total_mib[row, j]) - int(state.free_mib[row, j]) for j in range(2))
    assert held == [24576, 24576 + 12288]  # 0.6, and 0.6 + 0.3, of 40 GiB


def test_a_gpu_whose_running_pod_cannot_be_charged_takes_no_new_pod() -> None:
    sim = _running_on_unlabelled_node()
    rec_a, rec_b = sim.pods["default/a"], sim.pods["default/b"]
    # A fault no component writes (two schedulers' binds crossing): b's assignment names a's GPU too.
    rec_b.obj["metadata"]["annotations"][GPU_ASSIGNMENT] = rec_a.obj["metadata"]["annotations"][
        GPU_ASSIGNMENT
    ]
    gpu = json.loads(rec_a.obj["metadata"]["annotations"][GPU_ASSIGNMENT])["gpus"][0]["index"]
    sched = restart(sim)
    sim.submit_pod(fraction("new", "0.2"))
    run(sim, sched, cycles=2)
    state = sched.cache.state
    row = state.row_of("n1")
    assert not bool(state.healthy[row, gpu])  # one of a and b is not charged there: no new pod goes there
    assert any("take no new pod until it is charged" in e for e in sched.cache.errors)
    new = json.loads(sim.pods["default/new"].obj["metadata"]["annotations"][GPU_ASSIGNMENT])
    assert new["gpus"][0]["index"] != gpu
    sim.evict(sched.cache.pods[rec_a.obj["metadata"]["uid"]], action="user", message="deleted")
    run(sim, sched, cycles=40)  # a's grace period: then b is charged and the GPU takes pods again
    assert bool(state.healthy[row, gpu]) and not state.blocked
    assert_arrays_match_world(sim, sched)


def test_pods_of_a_node_deleted_before_the_restart_count_toward_their_queue() -> None:
    """A Node deleted while its pods run (kubectl delete node), then the scheduler restarted: the new one
    never saw the node, so it holds no place for them, but they run and count toward their queue's limit,
    once (not again when the node registers again), until they are gone."""
    n1, n2 = node("n1", A100, 2, 64, 512), node("n2", A100, 2, 64, 512)
    sim, sched = cluster([n1, n2, queue("a", None, 2, limit=2)])
    for i in range(2):
        sim.submit_pod(_in_a(f"a-{i}", gpus=1, fraction=None))
    sim.submit_pod(_in_a("half", gpus=0, fraction="0.5"))  # 0.5 of the limit's 2 GPUs... over: pending
    run(sim, sched, cycles=2)
    where = {sim.pods[f"a/a-{i}"].obj["spec"]["nodeName"] for i in range(2)}
    assert phase(sim, "a/half") == "Pending" and len(where) == 1  # binpack: both on one node
    (gone,) = where
    sim.delete_object("Node", sim.nodes[gone])
    sched = restart(sim)
    run(sim, sched, cycles=2)
    assert phase(sim, "a/half") == "Pending"  # the limit counts the pods of the node it never saw
    assert sched.cache.index.usage.by_queue()["a"][0] == 2000
    assert sched.last_session is not None and sched.last_session.tree.nodes["a"].allocated.gpu == 2.0
    sim.add_object("Node", node(gone, A100, 2, 64, 512))  # registered again: held there, counted once
    run(sim, sched, cycles=2)
    assert sched.cache.index.usage.by_queue()["a"][0] == 2000 and phase(sim, "a/half") == "Pending"
    assert_arrays_match_world(sim, sched)


def test_pods_of_a_deleted_node_stop_counting_when_they_are_gone() -> None:
    n1, n2 = node("n1", A100, 2, 64, 512), node("n2", A100, 2, 64, 512)
    sim, sched = cluster([n1, n2, queue("a", None, 2, limit=2)])
    sim.submit_pod(_in_a("a-0", gpus=2, fraction=None))
    run(sim, sched, cycles=2)
    gone = sim.pods["a/a-0"].obj["spec"]["nodeName"]
    sim.delete_object("Node", sim.nodes[gone])
    sched = restart(sim)
    sim.submit_pod(_in_a("next", gpus=1, fraction=None))
    run(sim, sched, cycles=2)
    assert phase(sim, "a/next") == "Pending"
    uid = sim.pods["a/a-0"].obj["metadata"]["uid"]
    sim.evict(sched.cache.pods[uid], action="test", message="the pod garbage collector")
    run(sim, sched, cycles=3, dt=DEFAULT_GRACE_S)
    assert "a" not in sched.cache.index.usage.by_queue() or sched.cache.index.usage.by_queue()["a"][0] == 1000
    assert phase(sim, "a/next") == "Running"


def _in_a(name: str, *, gpus: int, fraction: str | None) -> dict[str, Any]:
    annotations = {GPU_FRACTION: fraction} if fraction else {}
    return pod(name, "a", arrival_s=0, duration_s=100_000, cpu="1", gpus=gpus, annotations=annotations)
