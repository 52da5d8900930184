"""Jobs: members that succeeded count toward minMember; a PodGroup's priority class is the cluster's."""

from __future__ import annotations

from typing import Any

from scheduler.api.gpu_request import GPURequest
from scheduler.api.keys import POD_GROUP
from scheduler.api.podgroup import PodGroup
from scheduler.cache.ledger import Holding, HoldKind, Ledger
from scheduler.model.jobs import build_jobs, job_facts
from scheduler.model.types import Placement, PodInfo, PodPhase
from scheduler.state.backend import get_namespace
from scheduler.state.cluster_state import ClusterState
from tests.framework.helpers import A100, cluster, node, phase, pod, podgroup, queue
from tests.queues.util import Recorder


def _member(name: str, group: str, **kw: Any) -> dict[str, Any]:
    p = pod(name, "q", gpus=1, cpu="1", **kw)
    p["metadata"]["annotations"][POD_GROUP] = group
    return p


def test_a_gang_that_loses_a_member_after_a_sibling_succeeded_runs_again():
    # minMember 3: w-0 finishes at t=5, w-1 is lost at t=10 (drained). Running w-2 plus the one that
    # succeeded make 2 of 3: the recreated w-1 is the one member needed, not two.
    objs = [node("n0", A100, 4, 64, 512), queue("q", None, 4), podgroup("g", "q", "q", 3)]
    objs.append(_member("w-0", "g", arrival_s=0, duration_s=5))
    objs += [_member(f"w-{i}", "g", arrival_s=0, duration_s=10_000, grace_s=0) for i in (1, 2)]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(10)
    assert phase(sim, "q/w-0") == "Succeeded" and phase(sim, "q/w-1") == "Running"
    lost = next(p for p in sched.cache.pods.values() if p.name == "w-1")
    sim.evict(lost, action="drain", message="node drained")  # the controller recreates it once it is gone
    rec.run(3)
    assert phase(sim, "q/w-1") == "Running" and phase(sim, "q/w-2") == "Running"
    job = next(j for j in sched.last_session.jobs if j.key == "q/g")
    assert (job.succeeded, sched.last_session.facts(job).need) == (1, 0)
    rec.run(70)  # longer than the gang's stale grace period: nothing is evicted
    assert rec.evictions() == [] and phase(sim, "q/w-2") == "Running"


def test_build_jobs_counts_succeeded_members_toward_min_member():
    def member(name: str, phase_: PodPhase) -> PodInfo:
        return PodInfo(uid=name, namespace="q", name=name, queue="q", priority=50, preemptible=True,
                       request=GPURequest(kind="whole", milli=1000, num_devices=1), group="q/g", phase=phase_,
                       node="n0" if phase_ is not PodPhase.PENDING else None)  # fmt: skip

    group = PodGroup.model_validate(podgroup("g", "q", "q", 3))
    pods = [
        member("done", PodPhase.SUCCEEDED),
        member("run", PodPhase.RUNNING),
        member("new", PodPhase.PENDING),
    ]
    (job,) = build_jobs(pods, {"q/g": group})
    held = Ledger(ClusterState(get_namespace("numpy"), max_gpus=1, capacity=1))
    f = job_facts(job, held)  # "run" runs as the watch shows it, not accounted in the ledger (yet)
    assert (len(f.running), f.unaccounted, job.succeeded, len(f.pending), f.need) == (0, 1, 1, 1, 1)
    held.pods["run"] = Holding(HoldKind.BOUND, Placement(0, (), 0, 0))
    f = job_facts(job, held)
    assert (len(f.running), f.unaccounted, job.succeeded, len(f.pending), f.need) == (1, 0, 1, 1, 1)


def test_a_podgroup_priority_class_is_looked_up_in_the_cluster():
    urgent = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
              "metadata": {"name": "urgent-ml"}, "value": 120}  # fmt: skip
    group = podgroup("g", "q", "q", 2)
    group["spec"]["priorityClassName"] = "urgent-ml"
    objs = [urgent, node("n0", A100, 2, 64, 512), queue("q", None, 2), group]
    objs += [pod(f"t-{i}", "q", arrival_s=0, duration_s=10_000, gpus=1, cpu="1") for i in range(2)]
    objs += [
        _member(f"u-{i}", "g", arrival_s=5, duration_s=10_000, priority_class="urgent-ml") for i in range(2)
    ]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(6)
    job = next(j for j in sched.last_session.jobs if j.key == "q/g")
    assert (job.priority, job.preemptible) == (120, False)  # not the built-in fallback (train, 50)
    assert sorted(e["pod"] for e in rec.evictions("preempt")) == ["q/t-0", "q/t-1"]
