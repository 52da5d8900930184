"""Preemption inside a queue: higher priority evicts lower-priority preemptible pods, never across queues."""

from scheduler.model.reasons import Reason
from tests.framework.helpers import A100, cluster, node, phase, pod, queue
from tests.queues.util import GRACE_S, Recorder, gpus_by_queue


def test_higher_priority_preempts_the_youngest_lower_priority_pods_of_its_queue():
    objs = [
        node("n0", A100, 4, 64, 512),
        node("n1", A100, 2, 64, 512),
        queue("research", None, 4),
        queue("ops", None, 2),
    ]
    objs += [pod(f"train-{i}", "research", arrival_s=i, duration_s=10_000, gpus=1) for i in range(4)]
    objs += [pod(f"ops-{i}", "ops", arrival_s=0, duration_s=10_000, gpus=1) for i in range(2)]
    objs += [
        pod(f"build-{i}", "research", arrival_s=10, duration_s=10_000, gpus=1, priority_class="build")
        for i in range(2)
    ]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(12 + GRACE_S)  # the beneficiaries are bound once their victims have terminated
    ev = rec.evictions()
    assert sorted(e["pod"] for e in ev) == ["research/train-2", "research/train-3"]
    assert {e["action"] for e in ev} == {"preempt"} and all(
        e["beneficiary"].startswith("research/build-") for e in ev
    )
    assert phase(sim, "research/build-0") == "Running" and phase(sim, "research/build-1") == "Running"
    assert gpus_by_queue(sim) == {"research": 4.0, "ops": 2.0}  # the other queue untouched


def test_preemption_never_crosses_queues():
    # team-b's high-priority pods find the cluster full of team-a's low-priority pods. team-a is within its
    # quota, so reclaim may not take from it, and preempt never looks outside team-b.
    objs = [node("n0", A100, 4, 64, 512), queue("team-a", None, 4), queue("team-b", None, 0)]
    objs += [pod(f"a-{i}", "team-a", arrival_s=0, duration_s=10_000, gpus=1) for i in range(4)]
    objs += [
        pod(f"b-{i}", "team-b", arrival_s=5, duration_s=10_000, gpus=1, priority_class="build-preemptible")
        for i in range(2)
    ]
    objs += [
        pod(f"binf-{i}", "team-b", arrival_s=5, duration_s=10_000, gpus=1, priority_class="inference")
        for i in range(1)
    ]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(10)
    assert rec.evictions() == []
    assert gpus_by_queue(sim) == {"team-a": 4.0}
    assert sim.pods["team-b/b-0"].reason[0] == Reason.QUEUE_AT_FAIR_SHARE
    assert sim.pods["team-b/binf-0"].reason[0] == Reason.OVER_QUOTA


def test_preemption_respects_priority_and_keeps_non_preemptible_pods():
    objs = [node("n0", A100, 4, 64, 512), queue("q", None, 4)]
    objs += [
        pod(f"inf-{i}", "q", arrival_s=0, duration_s=10_000, gpus=1, priority_class="inference")
        for i in range(2)
    ]
    objs += [
        pod(f"bp-{i}", "q", arrival_s=1 + i, duration_s=10_000, gpus=1, priority_class="build-preemptible")
        for i in range(2)
    ]
    objs += [pod(f"train-{i}", "q", arrival_s=5, duration_s=10_000, gpus=1) for i in range(2)]  # lower: waits
    objs += [pod("build-0", "q", arrival_s=8, duration_s=10_000, gpus=1, priority_class="build")]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(12 + GRACE_S)
    assert [e["pod"] for e in rec.evictions()] == [
        "q/bp-1"
    ]  # the youngest preemptible, never an inference pod
    assert phase(sim, "q/build-0") == "Running" and phase(sim, "q/train-0") == "Pending"


def test_a_queue_at_its_limit_preempts_its_own_lower_priority_pods():
    objs = [node("n0", A100, 8, 64, 512), queue("q", None, 1, limit=2)]
    objs += [pod(f"train-{i}", "q", arrival_s=i, duration_s=10_000, gpus=1) for i in range(2)]
    objs.append(
        pod("urgent", "q", arrival_s=5, duration_s=10_000, gpus=1, priority_class="build-preemptible")
    )
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(8 + GRACE_S)
    assert [e["pod"] for e in rec.evictions("preempt")] == ["q/train-1"]  # 6 GPUs idle, but the limit is 2
    assert phase(sim, "q/urgent") == "Running" and gpus_by_queue(sim) == {"q": 2.0}
    assert sim.pods["q/train-1"].reason[0] == Reason.OVER_LIMIT
