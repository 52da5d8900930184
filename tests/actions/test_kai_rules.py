"""KAI Scheduler's queue rules on the simulated cluster: each class of issue 15's findings, one test each.

Queue quotas, fair shares and priorities here are chosen so the rule under test decides alone; every test
names the exact pods evicted (or that none are) and the reason the waiting pod carries.
"""

from __future__ import annotations

from scheduler.api.keys import GPU_MEMORY, POD_GROUP
from scheduler.model.reasons import Reason
from tests.framework.helpers import A100, assignment, cluster, node, phase, pod, podgroup, queue
from tests.queues.util import GRACE_S, Recorder, gpus_by_queue

H100 = ("H100", 81920)


def gang(
    name: str, q: str, n: int, gpus: int, *, arrival_s: float, min_member: int | None = None
) -> list[dict]:
    objs = [podgroup(name, q, q, n if min_member is None else min_member)]
    for i in range(n):
        p = pod(f"{name}-{i}", q, arrival_s=arrival_s, duration_s=10_000, gpus=gpus, cpu="1")
        p["metadata"]["annotations"][POD_GROUP] = name
        objs.append(p)
    return objs


def test_a_queue_below_quota_gets_it_back_from_one_big_gang():
    # a (quota 2) runs one gang of 4 on all 4 GPUs; b (quota 2) asks for 2. Taking the gang leaves a with
    # nothing, below its quota: allowed, because a was over its share before the gang was taken.
    objs = [node("n0", A100, 4, 64, 512), queue("a", None, 2), queue("b", None, 2)]
    objs += gang("big", "a", 4, 1, arrival_s=0)
    objs += [pod(f"b-{i}", "b", arrival_s=5, duration_s=10_000, gpus=1) for i in range(2)]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(6)
    assert sorted(e["pod"] for e in rec.evictions("reclaim")) == [f"a/big-{i}" for i in range(4)]
    rec.run(GRACE_S + 2)
    assert gpus_by_queue(sim) == {"b": 2.0}
    rec.run(10)
    assert len(rec.evictions()) == 4  # a may not take it back: with its gang it would pass its fair share
    assert sim.pods["a/big-0"].reason[0] == Reason.QUEUE_AT_FAIR_SHARE


def test_a_rule_that_blocks_a_reclaim_is_named():
    # b's 2-GPU pod only fits on n0, held by a-0 and a-1. a (quota 2) holds 3: the first victim is over its
    # share, the second would be taken from a queue at its quota and share.
    objs = [
        node("n0", A100, 2, 64, 512),
        node("n1", A100, 2, 64, 512),
        queue("a", None, 2),
        queue("b", None, 2),
    ]
    objs += [pod(f"a-{i}", "a", arrival_s=i, duration_s=10_000, gpus=1) for i in range(3)]
    objs.append(pod("b-0", "b", arrival_s=5, duration_s=10_000, gpus=2, node_selector={"pool": "n0"}))
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(8)
    assert {assignment(sim, f"a/a-{i}").node for i in range(2)} == {"n0"}
    assert rec.evictions() == []
    reason, message = sim.pods["b/b-0"].reason
    assert reason == Reason.RECLAIM_BLOCKED
    assert "queue a holds 2 GPUs, not over its share (2 GPUs); nor over its quota (2 GPUs)" in message
    assert "no set of" not in message  # not a capacity problem


def test_an_elastic_gang_says_its_minimum_runs():
    objs = [node("n0", A100, 2, 64, 512), queue("q", None, 2)]
    objs += gang("el", "q", 4, 1, arrival_s=0, min_member=1)
    sim, sched = cluster(objs)
    Recorder(sim, sched).run(3)
    assert sorted(phase(sim, f"q/el-{i}") for i in range(4)) == ["Pending", "Pending", "Running", "Running"]
    waiting = next(f"q/el-{i}" for i in range(4) if phase(sim, f"q/el-{i}") == "Pending")
    reason, message = sim.pods[waiting].reason
    assert reason == Reason.QUEUE_AT_FAIR_SHARE  # its queue holds its whole share: no reclaim for extras
    assert "needs 0 more pods" not in message and "runs its minMember (1)" in message


def test_gpu_memory_pods_count_their_share_for_the_limit():
    # Issue 14: a queue with GPU limit 1 received 7.8 GPUs of gpu-memory pods (each counted 0.001 GPU).
    objs = [node("a100-0", A100, 4, 64, 512), node("h100-0", H100, 4, 64, 512), queue("q", None, 1, limit=1)]
    mem = {GPU_MEMORY: "30000"}  # 0.73 of the smallest GPU that holds it (40 GiB), 0.37 of an 80 GiB one
    objs += [pod(f"m-{i}", "q", arrival_s=0, duration_s=10_000, cpu="1", annotations=mem) for i in range(8)]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    for _ in range(5):
        rec.cycle()
        assert gpus_by_queue(sim).get("q", 0.0) <= 1.0  # real shares, as written on the pods
        assert sched.last_session is not None and sched.last_session.tree.nodes["q"].allocated.gpu <= 1.0
    running = [k for k in sim.pods if phase(sim, k) == "Running"]
    assert len(running) == 1
    waiting = next(k for k in sim.pods if phase(sim, k) == "Pending")
    assert sim.pods[waiting].reason[0] == Reason.OVER_LIMIT


def test_a_memory_only_queue_has_a_fair_share_and_reclaims():
    # a (quota 0) fills the cluster; b (quota 2) asks only gpu-memory: its demand is real, so it reclaims.
    objs = [node("n0", A100, 4, 64, 512), queue("a", None, 0), queue("b", None, 2)]
    objs += [pod(f"a-{i}", "a", arrival_s=0, duration_s=10_000, gpus=1, cpu="1") for i in range(4)]
    mem = {GPU_MEMORY: "20000"}  # 0.49 of a 40 GiB GPU
    objs += [pod(f"m-{i}", "b", arrival_s=5, duration_s=10_000, cpu="1", annotations=mem) for i in range(4)]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(6)
    fair = sched.last_session.tree.nodes["b"].fair_share.gpu
    assert 1.9 < fair <= 2.0  # 4 x 0.489 GPU, not 4 x 0.001
    assert len(rec.evictions("reclaim")) == 2
    rec.run(GRACE_S + 2)
    assert all(phase(sim, f"b/m-{i}") == "Running" for i in range(4))
    assert gpus_by_queue(sim) == {"a": 2.0, "b": 4 * 489 / 1000}


def test_the_fewest_pods_are_evicted_even_if_older():
    # b needs a whole GPU: one old pod of a, or two young halves of a. One eviction is the plan.
    half = {"gpu-fraction": "0.5"}
    objs = [
        node("n0", A100, 1, 64, 512),
        node("n1", A100, 1, 64, 512),
        queue("a", None, 0),
        queue("b", None, 1),
    ]
    objs.append(pod("old", "a", arrival_s=0, duration_s=10_000, gpus=1, cpu="1"))
    objs += [
        pod(f"young-{i}", "a", arrival_s=2, duration_s=10_000, cpu="1", annotations=half) for i in range(2)
    ]
    objs.append(pod("b-0", "b", arrival_s=5, duration_s=10_000, gpus=1, cpu="1"))
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(7)
    assert [e["pod"] for e in rec.evictions()] == ["a/old"]


def test_an_older_gang_goes_instead_of_a_younger_pod_that_would_not_make_room():
    # On n0, GPU 0 is shared by a young half of a and a half of a non-preemptible pod; GPU 1 holds a member
    # of a's old gang (its other member is on n1). Evicting the young half never frees a whole GPU.
    half = {"gpu-fraction": "0.5"}
    objs = [node("n0", A100, 2, 64, 512), node("n1", A100, 2, 64, 512), queue("a", None, 0), queue("b", None, 1),
            queue("x", None, 2)]  # fmt: skip
    objs.append(pod("keep-0", "x", arrival_s=0, duration_s=10_000, cpu="1", annotations=half,
                    priority_class="inference"))  # fmt: skip
    objs.append(pod("young", "a", arrival_s=1, duration_s=10_000, cpu="1", annotations=half))
    objs += gang("g", "a", 2, 1, arrival_s=0)
    objs.append(
        pod("keep-1", "x", arrival_s=0, duration_s=10_000, gpus=1, cpu="1", priority_class="inference")
    )
    objs.append(pod("b-0", "b", arrival_s=5, duration_s=10_000, gpus=1, cpu="1"))
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(4)
    assert gpus_by_queue(sim) == {"x": 1.5, "a": 2.5}
    rec.run(3)
    assert sorted(e["pod"] for e in rec.evictions()) == [
        "a/g-0",
        "a/g-1",
    ]  # the gang, whole; not the young pod
    rec.run(GRACE_S + 2)
    assert phase(sim, "b/b-0") == "Running" and phase(sim, "a/young") == "Running"


def test_victims_never_share_a_gpu_with_their_beneficiary():
    # Every cycle of a reclaim with grace periods: the GPU shares of running pods (victims still terminating
    # included) never exceed a GPU.
    half = {"gpu-fraction": "0.5"}
    objs = [node("n0", A100, 2, 64, 512), queue("a", None, 0), queue("b", None, 2)]
    objs += [pod(f"a-{i}", "a", arrival_s=0, duration_s=10_000, cpu="1", annotations=half) for i in range(4)]
    objs += [pod(f"b-{i}", "b", arrival_s=5, duration_s=10_000, cpu="1", annotations=half) for i in range(3)]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    for _ in range(GRACE_S + 10):
        rec.cycle()
        use: dict[tuple[str, int], int] = {}
        for key in sim.pods:
            a = assignment(sim, key)
            if a is not None and phase(sim, key) == "Running":
                for g in a.gpus:
                    use[(a.node, g.index)] = use.get((a.node, g.index), 0) + g.milli
        assert all(milli <= 1000 for milli in use.values()), use
    assert gpus_by_queue(sim) == {"a": 0.5, "b": 1.5}
