"""What a waiting pod, an eviction or a pipelined pod tells people: true of the cluster as it is, not of a
plan the cycle tried and rolled back (issue 31, "Misleading")."""

from __future__ import annotations

from scheduler.actions.allocate import Allocate
from scheduler.api.keys import POD_GROUP
from scheduler.cycle import Scheduler
from scheduler.model.reasons import PendingReason, Reason
from tests.framework.helpers import A100, cluster, node, pod, podgroup, queue, run


def test_a_gang_that_does_not_fit_is_told_how_many_fit_not_what_its_own_members_took() -> None:
    """Two nodes with one free GPU each and a gang of three one-GPU pods: the first two members fit (one on
    each node) and are rolled back. The reason must not say the nodes lack a free GPU (each has one)."""
    objs = [node("n0", A100, 2, 64, 512), node("n1", A100, 2, 64, 512), queue("q", None, 8)]
    objs += [pod(f"busy-{i}", "q", arrival_s=0, duration_s=10_000, gpus=1) for i in range(2)]
    objs.append(podgroup("g", "q", "q", 3))
    objs += [
        pod(f"g-{i}", "q", arrival_s=5, duration_s=10_000, gpus=1, annotations={POD_GROUP: "g"})
        for i in range(3)
    ]
    sim, sched = cluster(objs, policy="spread")  # one busy pod on each node
    run(sim, sched, 3)
    sim.advance(6.0)
    result = sched.run_cycle()
    why = {sched.cache.pods[uid].name: r for uid, r in result.reasons.items()}
    message = why["g-0"].message  # (reclaim adds that the queue cannot take more than the cluster holds)
    assert message.startswith("gang q/g needs 3 more pods placed together; only 2 fit at once now"), message
    assert "lack a free GPU" not in message and {why[f"g-{i}"].message for i in range(3)} == {message}


def test_a_gang_member_that_fits_nowhere_is_named_with_why() -> None:
    """One member fits, the other asks more GPUs than any node has: allocate tells the gang how many fit
    and why the rest fit nowhere, measured on the cluster as it is. (Only allocate runs: the actions that
    make room judge a gang by its first member's shape.)"""
    objs = [node("n0", A100, 2, 64, 512), queue("q", None, 8), podgroup("g", "q", "q", 2)]
    objs.append(pod("g-0", "q", arrival_s=0, duration_s=10_000, gpus=1, annotations={POD_GROUP: "g"}))
    objs.append(pod("g-1", "q", arrival_s=0, duration_s=10_000, gpus=4, annotations={POD_GROUP: "g"}))
    sim, sched = cluster(objs)
    sched.actions = [Allocate()]
    run(sim, sched, 1)
    why = {sched.cache.pods[uid].name: r.message for uid, r in sched.last_reasons.items()}
    assert why["g-0"].startswith(
        "gang q/g needs 2 more pods placed together; only 1 fit at once now, the others nowhere: "
        "no node fits 4 whole GPUs (of 1 nodes: 1 lack 4 free GPUs)"
    ), why["g-0"]


def _reasons(sched: Scheduler) -> dict[str, PendingReason]:
    return {sched.cache.pods[uid].name: r for uid, r in sched.last_reasons.items() if uid in sched.cache.pods}


def test_each_pipelined_member_names_its_own_place_the_same_way_every_cycle() -> None:
    """A gang of two preempts one pod on each of two nodes: each member is pipelined behind the victim on
    its own node, says so, and says it in the same words while the victims terminate (one Event each)."""
    objs = [node("n0", A100, 1, 64, 512), node("n1", A100, 1, 64, 512), queue("q", None, 2)]
    objs += [pod(f"low-{i}", "q", arrival_s=0, duration_s=10_000, gpus=1, grace_s=30) for i in range(2)]
    objs.append(podgroup("high", "q", "q", 2))
    objs[-1]["spec"]["priorityClassName"] = "build-preemptible"
    objs += [
        pod(f"high-{i}", "q", arrival_s=5, duration_s=10_000, gpus=1, priority_class="build-preemptible",
            annotations={POD_GROUP: "high"})
        for i in range(2)
    ]  # fmt: skip
    sim, sched = cluster(objs)
    run(sim, sched, 5)  # t=5: the gang arrived, both low pods preempted, the gang pipelined
    assert sorted(e["pod"] for e in sched.last_session.events if e["type"] == "Pipelined") == [
        "q/high-0", "q/high-1"
    ]  # fmt: skip
    first = _reasons(sched)
    run(sim, sched, 3)  # the victims still terminate
    later = _reasons(sched)
    nodes = set()
    for i in range(2):
        assert first[f"high-{i}"].reason is Reason.PIPELINED, first
        assert later[f"high-{i}"] == first[f"high-{i}"], (first, later)
        nodes.add(first[f"high-{i}"].message.split(" is reserved")[0].removeprefix("its place on "))
    assert nodes == {"n0", "n1"}, later
    assert all("evicted for it" not in r.message for r in later.values())


def test_a_pod_pipelined_behind_one_the_user_deleted_does_not_say_it_was_evicted_for_it() -> None:
    objs = [node("n0", A100, 1, 64, 512), queue("q", None, 1)]
    objs.append(pod("old", "q", arrival_s=0, duration_s=10_000, gpus=1, grace_s=30))
    objs.append(pod("new", "q", arrival_s=3, duration_s=10_000, gpus=1))
    sim, sched = cluster(objs)
    run(sim, sched, 2)
    sim.evict(next(p for p in sched.cache.pods.values() if p.name == "old"), action="user", message="deleted")
    run(sim, sched, 2)  # t=4: "new" arrived, placed where "old" still terminates
    first = _reasons(sched)["new"]
    run(sim, sched, 3)
    later = _reasons(sched)["new"]
    assert first.reason is Reason.PIPELINED and later == first, (first, later)
    assert first.message == "its place on n0 is reserved; it is bound once q/old has terminated"


def test_a_queue_over_its_fair_share_is_told_so_with_what_it_holds() -> None:
    """Queue a has no share at all (quota 0, no over-quota weight) and holds the only GPU: its next pod
    waits, and the reason says the queue is over its fair share, not "at" it, naming each figure."""
    objs = [node("n0", A100, 1, 64, 512), queue("a", None, 0, weight=0), queue("b", None, 1)]
    objs.append(pod("a-0", "a", arrival_s=0, duration_s=10_000, gpus=1))
    objs.append(pod("a-1", "a", arrival_s=2, duration_s=10_000, gpus=1))
    sim, sched = cluster(objs)
    run(sim, sched, 3)
    why = _reasons(sched)["a-1"]
    assert why.reason is Reason.QUEUE_AT_FAIR_SHARE
    assert why.message.endswith(
        "; queue a is over its fair share (it holds 1 GPU; fair share 0 GPUs, quota 0 GPUs); "
        "1 GPU more waits for idle capacity"
    ), why.message


def test_a_reclaim_names_the_quota_it_restores_not_a_share_of_what_has_arrived() -> None:
    """team-a (quota 4) runs 8 GPUs; team-b (quota 4) asks for its quota, its first pod a cycle before the
    others. The first reclaim is for that pod alone, when team-b's fair share is 1 GPU (what it asked so
    far): the eviction says what team-b is owed, its quota of 4 GPUs."""
    objs = [node("n0", A100, 4, 64, 512), node("n1", A100, 4, 64, 512), queue("team-a", None, 4),
            queue("team-b", None, 4)]  # fmt: skip
    objs += [pod(f"a-{i}", "team-a", arrival_s=i, duration_s=10_000, gpus=1) for i in range(8)]
    objs += [pod(f"b-{i}", "team-b", arrival_s=60 + min(i, 1), duration_s=10_000, gpus=1) for i in range(4)]
    sim, sched = cluster(objs)
    messages = []
    for _ in range(62):
        run(sim, sched, 1)
        messages += [e["message"] for e in sched.last_session.events if e["type"] == "Evicted"]
    assert (
        messages[0] == "reclaimed for team-b/b-0 of queue team-b, below its quota (it holds 0 GPUs of 4 GPUs)"
    )
    assert len(messages) == 4 and all("below its quota" in m for m in messages), messages
