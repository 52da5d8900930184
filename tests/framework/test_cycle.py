"""The scheduling cycle on the simulated cluster: gangs, fractions, reasons, quotas, other schedulers."""

from scheduler.api.keys import GPU_FRACTION, GPU_MEMORY, POD_GROUP
from scheduler.model.reasons import Reason
from tests.framework.helpers import A100, T4, assignment, cluster, node, phase, pod, podgroup, queue, run


def test_fractions_share_one_gpu_and_assignment_is_written():
    sim, sched = cluster([node("n1", A100, 2, 32, 128)] + [
        pod(f"p{i}", "default", arrival_s=0, duration_s=100, cpu="1", annotations={GPU_FRACTION: "0.25"}) for i in range(4)
    ])  # fmt: skip
    run(sim, sched)
    slots = set()
    for i in range(4):
        a = assignment(sim, f"default/p{i}")
        assert a is not None and a.node == "n1" and len(a.gpus) == 1
        assert (
            a.gpus[0].milli == 250
            and a.gpus[0].memory_mib == 10240
            and a.gpus[0].uuid == ""  # no node agent in the simulator: no report names the GPU
        )
        slots.add(a.gpus[0].index)
        assert phase(sim, f"default/p{i}") == "Running"
    assert len(slots) == 1  # binpack: all four on one GPU


def test_gang_is_placed_whole_or_not_at_all():
    objs = [node("n1", A100, 4, 64, 256), node("n2", A100, 4, 64, 256), queue("team", None, 8)]
    objs.append(podgroup("big", "team", "team", 3))
    objs += [
        pod(f"big-{i}", "team", arrival_s=0, duration_s=100, gpus=4, annotations={POD_GROUP: "big"})
        for i in range(3)
    ]
    objs.append(podgroup("small", "team", "team", 2))
    objs += [
        pod(f"small-{i}", "team", arrival_s=0, duration_s=100, gpus=4, annotations={POD_GROUP: "small"})
        for i in range(2)
    ]
    sim, sched = cluster(objs)
    run(sim, sched, cycles=3)
    assert all(phase(sim, f"team/big-{i}") == "Pending" for i in range(3))
    assert all(phase(sim, f"team/small-{i}") == "Running" for i in range(2))
    reason = sim.pods["team/big-0"].reason
    assert (
        reason is not None
        and reason[0] == Reason.GANG_UNSCHEDULABLE
        and "team/big needs 3 more pods" in reason[1]
    )
    status = sim.group_status["team/big"]
    assert status.phase == "Unschedulable" and status.conditions[0].reason == Reason.GANG_UNSCHEDULABLE
    assert sim.group_status["team/small"].phase == "Running"


def test_incomplete_gang_waits_for_members():
    objs = [node("n1", A100, 4, 64, 256), podgroup("g", "default", "default", 3)]
    objs += [
        pod(f"g-{i}", "default", arrival_s=0, duration_s=10, gpus=1, annotations={POD_GROUP: "g"})
        for i in range(2)
    ]
    sim, sched = cluster(objs)
    run(sim, sched)
    assert sim.pods["default/g-0"].reason[0] == Reason.GANG_INCOMPLETE
    assert "needs 3 pods; only 2 exist" in sim.pods["default/g-0"].reason[1]


def test_invalid_requests_and_queues_are_explained_and_others_go_on():
    sim, sched = cluster([
        node("n1", A100, 1, 16, 64),
        pod("bad", "default", arrival_s=0, duration_s=10, annotations={GPU_FRACTION: "abc"}),
        pod("huge", "default", arrival_s=0, duration_s=10, annotations={GPU_MEMORY: "999999"}),
        pod("ghost", "nowhere", arrival_s=0, duration_s=10, annotations={GPU_FRACTION: "0.5"}, namespace="default"),
        pod("good", "default", arrival_s=0, duration_s=10, annotations={GPU_FRACTION: "0.5"}),
    ])  # fmt: skip
    run(sim, sched)
    assert sim.pods["default/bad"].reason == (
        Reason.INVALID_REQUEST,
        'annotation gpu-fraction="abc" is not a number; use a value between 0 and 1 such as "0.5"',
    )
    assert "more than the largest GPU in the cluster (40960 MiB)" in sim.pods["default/huge"].reason[1]
    assert sim.pods["default/ghost"].reason[0] == Reason.INVALID_QUEUE
    assert phase(sim, "default/good") == "Running"


def test_whole_gpu_pods_of_other_schedulers_are_accounted():
    foreign = pod("foreign", "default", arrival_s=0, duration_s=1000, gpus=3)
    foreign["spec"]["schedulerName"] = "default-scheduler"
    foreign["spec"]["nodeName"] = "n1"
    foreign["status"] = {"phase": "Running"}
    sim, sched = cluster([node("n1", A100, 4, 64, 256), foreign,
                          pod("mine", "default", arrival_s=0, duration_s=10, gpus=2)])  # fmt: skip
    run(sim, sched)
    assert phase(sim, "default/mine") == "Pending"
    assert "lack 2 free GPUs" in sim.pods["default/mine"].reason[1]


def test_non_preemptible_pods_stay_within_quota_and_limits_hold():
    objs = [node("n1", A100, 8, 64, 256), queue("q", None, 2, limit=3)]
    objs += [
        pod(f"inf-{i}", "q", arrival_s=0, duration_s=100, gpus=1, priority_class="inference")
        for i in range(3)
    ]
    objs += [pod(f"train-{i}", "q", arrival_s=5, duration_s=100, gpus=1) for i in range(2)]
    sim, sched = cluster(objs)
    run(sim, sched)
    assert sim.pods["q/inf-2"].reason[0] == Reason.OVER_QUOTA  # 2 of 2 quota used, limit 3 not reached
    run(sim, sched, cycles=8)
    running = sorted(k for k in sim.pods if phase(sim, k) == "Running")
    assert running == ["q/inf-0", "q/inf-1", "q/train-0"]  # preemptible work may go over quota
    assert sim.pods["q/train-1"].reason[0] == Reason.OVER_LIMIT and "limit" in sim.pods["q/train-1"].reason[1]


def test_queue_below_fair_share_is_served_first():
    objs = [node("n1", A100, 4, 64, 256), queue("a", None, 2), queue("b", None, 2)]
    objs += [pod(f"a-{i}", "a", arrival_s=0, duration_s=100, gpus=1) for i in range(4)]
    objs += [pod(f"b-{i}", "b", arrival_s=0, duration_s=100, gpus=1) for i in range(4)]
    sim, sched = cluster(objs)
    run(sim, sched)
    running = [k for k in sim.pods if phase(sim, k) == "Running"]
    assert sum(k.startswith("a/") for k in running) == 2 and sum(k.startswith("b/") for k in running) == 2


def test_memory_requests_use_model_memory_and_completion_frees_capacity():
    objs = [node("t4", T4, 1, 16, 64)]
    objs += [
        pod(f"m{i}", "default", arrival_s=0, duration_s=30, annotations={GPU_MEMORY: "7000"})
        for i in range(3)
    ]
    sim, sched = cluster(objs)
    run(sim, sched)
    assert [phase(sim, f"default/m{i}") for i in range(3)] == ["Running", "Running", "Pending"]
    assert assignment(sim, "default/m0").gpus[0].milli == 456  # ceil(7000 / 15360 * 1000)
    run(sim, sched, dt=30)
    assert phase(sim, "default/m0") == "Succeeded" and phase(sim, "default/m2") == "Running"
