"""What a running job is charged to is fixed when it starts (issue 27, findings 2 and 3): its pods stay in
their job whatever their pod-group annotation says later, and its queue, priority and preemptibility stay
the admitted ones whatever its PodGroup says later, across restarts too (the assignment records them).
tests/kube/test_kube_tenants.py plays the same edits on the real API server."""

from __future__ import annotations

import copy

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT, POD_GROUP
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.model.jobs import Job
from scheduler.sim.cluster import SimCluster
from tests.framework.helpers import A100, cluster, node, pod, podgroup, queue, run


def whole(name: str, queue_name: str, group: str | None = None) -> dict:
    annotations = {POD_GROUP: group} if group else {}
    obj = pod(name, queue_name, arrival_s=0, duration_s=10_000, cpu="1", gpus=1, annotations=annotations)
    obj["metadata"]["namespace"] = "ns"
    return obj


def job(sched: Scheduler, key: str) -> Job:
    return next(j for j in sched.cache.index.jobs() if j.key == key)


def restarted(sim: SimCluster) -> Scheduler:
    sched = Scheduler(sim, SchedulerConfig(policy="binpack", backend="numpy"))
    sim.relist()
    return sched


def test_the_assignment_records_what_the_job_was_admitted_with() -> None:
    sim, sched = cluster([node("n1", A100, 2, 32, 128), queue("a", None, 2), podgroup("g", "ns", "a", 2),
                          whole("g-0", "a", "g"), whole("g-1", "a", "g")])  # fmt: skip
    run(sim, sched)
    a = GPUAssignment.from_annotation(sim.pods["ns/g-0"].obj["metadata"]["annotations"][GPU_ASSIGNMENT])
    assert a.admitted is not None
    assert (a.admitted.queue, a.admitted.job, a.admitted.priority, a.admitted.preemptible) == (
        "a",
        "ns/g",
        50,
        True,
    )


def test_a_running_pod_annotated_into_another_group_stays_in_its_job() -> None:
    sim, sched = cluster([node("n1", A100, 4, 32, 128), queue("a", None, 0, limit=1),
                          podgroup("sink", "ns", "default", 1), whole("s0", "default", "sink"),
                          whole("w0", "a"), whole("w1", "a")])  # fmt: skip
    run(sim, sched)
    (running,) = [n for n in ("w0", "w1") if sim.pods[f"ns/{n}"].obj["spec"].get("nodeName")]
    other = {"w0": "w1", "w1": "w0"}[running]
    moved = copy.deepcopy(sim.pods[f"ns/{running}"].obj)
    moved["metadata"]["annotations"][POD_GROUP] = "sink"
    sim.update_object("Pod", moved)
    run(sim, sched, cycles=3)
    assert not sim.pods[f"ns/{other}"].obj["spec"].get("nodeName")  # a's limit of 1 GPU still holds
    assert job(sched, f"pod:ns/{running}").queue == "a"
    assert [p.name for p in job(sched, "ns/sink").members] == ["s0"]
    assert any("its pod group changed to ns/sink while it runs" in e for e in sched.cache.errors)
    sched = restarted(sim)  # the annotation says sink; the assignment says the job it was bound in
    run(sim, sched, cycles=2)
    assert job(sched, f"pod:ns/{running}").queue == "a"
    assert not sim.pods[f"ns/{other}"].obj["spec"].get("nodeName")


def test_a_running_gang_keeps_its_queue_priority_and_preemptibility() -> None:
    sim, sched = cluster([node("n1", A100, 2, 32, 128), queue("a", None, 2), queue("b", None, 2),
                          podgroup("g", "ns", "a", 2), whole("g-0", "a", "g"), whole("g-1", "a", "g")])  # fmt: skip
    run(sim, sched)
    edited = podgroup("g", "ns", "b", 2)
    edited["spec"].update(preemptibility="non-preemptible", priorityClassName="inference")
    sim.update_object("PodGroup", edited)
    run(sim, sched)
    g = job(sched, "ns/g")
    assert (g.queue, g.priority, g.preemptible) == ("a", 50, True)
    assert sched.cache.index.usage.by_queue() == {"a": (2000, 2000, 16384)}
    sched = restarted(sim)
    run(sim, sched)
    g = job(sched, "ns/g")
    assert (g.queue, g.priority, g.preemptible) == ("a", 50, True)
    # Once nothing of it runs, the PodGroup says what its next pods are admitted with.
    for name in ("ns/g-0", "ns/g-1"):
        sim.evict(sched.cache.pods[sim.pods[name].obj["metadata"]["uid"]], action="user", message="")
    run(sim, sched, cycles=40)
    g = job(sched, "ns/g")
    assert (g.queue, g.priority, g.preemptible) == ("b", 125, False)
