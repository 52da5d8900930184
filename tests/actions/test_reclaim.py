"""Reclaim on the simulated cluster: quota comes back, idle quota is lent and returned, weights split the
rest, limits hold."""

import pytest

from scheduler.api.keys import GPU_FRACTION
from scheduler.model.reasons import Reason
from tests.framework.helpers import A100, cluster, node, pod, queue
from tests.queues.util import GRACE_S, Recorder, gpus_by_queue


def nodes(n: int, gpus: int = 4) -> list[dict]:
    return [node(f"n{i}", A100, gpus, 64, 512) for i in range(n)]


def test_queue_below_quota_gets_it_back_by_reclaim_within_a_few_cycles():
    objs = [*nodes(2), queue("a", None, 4), queue("b", None, 4)]
    objs += [pod(f"a-{i}", "a", arrival_s=i, duration_s=10_000, gpus=1) for i in range(8)]
    objs += [pod(f"b-{i}", "b", arrival_s=10, duration_s=10_000, gpus=1) for i in range(4)]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(8)
    assert gpus_by_queue(sim) == {"a": 8.0}  # b idle: its quota is lent to a
    rec.run(2)  # b arrives at t=10
    rec.cycle()  # the first cycle after its arrival decides the reclaim
    ev = rec.evictions("reclaim")
    assert len(ev) == 4 and all(e["pod"].startswith("a/") and e["beneficiary"].startswith("b/") for e in ev)
    assert sorted(e["pod"] for e in ev) == ["a/a-4", "a/a-5", "a/a-6", "a/a-7"]  # the youngest
    # The victims terminate on their GPUs for their grace period; b's pods wait with their places kept.
    assert all(sim.pods[f"b/b-{i}"].reason[0] == Reason.PIPELINED for i in range(4))
    got = []
    for _ in range(GRACE_S + 2):
        rec.cycle()
        got.append(gpus_by_queue(sim).get("b", 0.0))
        assert gpus_by_queue(sim)["a"] >= 4.0  # never below its quota
        assert sum(gpus_by_queue(sim).values()) <= 8.0  # victims and beneficiaries never share a GPU
    assert got[0] == 0.0 and got[-1] == 4.0  # bound once the victims are gone
    rec.run(10)
    assert gpus_by_queue(sim) == {"a": 4.0, "b": 4.0}  # stable: no ping-pong
    assert len(rec.evictions()) == 4


def test_idle_quota_is_lent_out_and_returned():
    objs = [*nodes(2), queue("a", None, 2), queue("b", None, 6)]
    objs += [pod(f"a-{i}", "a", arrival_s=0, duration_s=10_000, gpus=1) for i in range(8)]
    objs += [pod(f"b-{i}", "b", arrival_s=5, duration_s=20, gpus=1) for i in range(6)]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(3)
    assert gpus_by_queue(sim) == {"a": 8.0}  # lent: a's quota is 2
    rec.run(4 + GRACE_S)  # b's pods are bound once a's victims have terminated
    assert gpus_by_queue(sim) == {"a": 2.0, "b": 6.0}  # returned: b takes its 6 back
    assert len(rec.evictions("reclaim")) == 6
    rec.run(25)  # b's work is done: a's recreated pods borrow the idle quota again
    assert gpus_by_queue(sim) == {"a": 8.0}


@pytest.mark.parametrize(
    ("weights", "gpus", "expected"),
    [((2, 1), 12, (8.0, 4.0)), ((3, 1), 10, (7.5, 2.5)), ((1, 1), 9, (4.5, 4.5))],
)
def test_over_quota_capacity_is_split_by_weight(weights, gpus, expected):
    objs = [node("n0", A100, gpus, 256, 2048), queue("a", None, 0, weight=weights[0]),
            queue("b", None, 0, weight=weights[1])]  # fmt: skip
    objs += [pod(f"a-{i}", "a", arrival_s=0, duration_s=10_000, gpus=1, cpu="1") for i in range(gpus)]
    objs += [pod(f"b-{i}", "b", arrival_s=5, duration_s=10_000, gpus=1, cpu="1") for i in range(gpus)]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(15 + GRACE_S)
    got = gpus_by_queue(sim)
    assert abs(got["a"] - expected[0]) <= 1.0 and abs(got["b"] - expected[1]) <= 1.0
    assert got["a"] + got["b"] == gpus
    n = len(rec.evictions())
    rec.run(10)
    assert len(rec.evictions()) == n  # settled


def test_fractional_over_quota_split_by_weight():
    objs = [node("n0", A100, 4, 256, 2048), queue("a", None, 0, weight=3), queue("b", None, 0, weight=1)]
    frac = {GPU_FRACTION: "0.5"}
    objs += [pod(f"a-{i}", "a", arrival_s=0, duration_s=10_000, cpu="1", annotations=frac) for i in range(8)]
    objs += [pod(f"b-{i}", "b", arrival_s=5, duration_s=10_000, cpu="1", annotations=frac) for i in range(8)]
    sim, sched = cluster(objs)
    Recorder(sim, sched).run(15 + GRACE_S)
    assert gpus_by_queue(sim) == {"a": 3.0, "b": 1.0}


def test_limit_is_never_exceeded():
    objs = [*nodes(2), queue("a", None, 1, limit=3), queue("b", None, 1, weight=1)]
    objs += [pod(f"a-{i}", "a", arrival_s=i % 5, duration_s=7, gpus=1) for i in range(12)]
    objs += [
        pod(f"af-{i}", "a", arrival_s=i, duration_s=5, annotations={GPU_FRACTION: "0.5"}) for i in range(6)
    ]
    objs += [pod(f"b-{i}", "b", arrival_s=8, duration_s=4, gpus=1) for i in range(3)]
    objs += [
        pod(f"hi-{i}", "a", arrival_s=3, duration_s=9, gpus=1, priority_class="build-preemptible")
        for i in range(3)
    ]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    peak = 0.0
    for _ in range(40):
        rec.cycle()
        a = gpus_by_queue(sim).get("a", 0.0)
        peak = max(peak, a)
        assert a <= 3.0
        assert sched.last_session.tree.nodes["a"].allocated.gpu <= 3.0 + 1e-9
    assert peak == 3.0  # it did use all it may


def test_reclaim_in_a_tree_stops_at_the_victim_side_quota():
    # org-x (quota 4) holds everything; org-y's team arrives and may take back only org-y's quota.
    objs = [*nodes(2), queue("org-x", None, 4), queue("org-y", None, 4),
            queue("x1", "org-x", 2), queue("x2", "org-x", 2), queue("y1", "org-y", 4)]  # fmt: skip
    objs += [pod(f"x1-{i}", "x1", arrival_s=0, duration_s=10_000, gpus=1) for i in range(5)]
    objs += [pod(f"x2-{i}", "x2", arrival_s=0, duration_s=10_000, gpus=1) for i in range(3)]
    objs += [pod(f"y1-{i}", "y1", arrival_s=5, duration_s=10_000, gpus=1) for i in range(8)]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(12 + GRACE_S)
    got = gpus_by_queue(sim)
    assert got["y1"] == 4.0 and got["x1"] + got["x2"] == 4.0
    assert got["x1"] >= 2.0 and got["x2"] >= 2.0  # no victim queue pushed below its quota
    assert all(e["pod"].startswith("x") for e in rec.evictions())
    reason = sim.pods["y1/y1-7"].reason
    assert (
        reason[0] == Reason.QUEUE_AT_FAIR_SHARE
        and "queue y1 is at its fair share (it holds 4 GPUs; fair share 4 GPUs" in reason[1]
    )
