"""The order queues are served in (KAI Scheduler's queue order), and the work-counted search budget."""

from __future__ import annotations

from scheduler.actions.ordering import compare_queues
from scheduler.api.queue import Queue
from scheduler.framework.budget import Budget, BudgetLimits
from scheduler.model.resources import Resources
from scheduler.queues.tree import QueueTree
from tests.framework.helpers import queue

TOTAL = Resources(gpu=16, cpu=64_000, memory=512 * 1024)


def tree(*queues: tuple[str, float, float, float]) -> QueueTree:
    """Queues (name, quota, allocated, fair share) in GPUs."""
    t = QueueTree(Queue.model_validate(queue(name, None, quota)) for name, quota, _, _ in queues)
    for name, _, allocated, fair in queues:
        t.nodes[name].allocated = Resources(gpu=allocated)
        t.nodes[name].fair_share = Resources(gpu=fair, cpu=TOTAL.cpu, memory=TOTAL.memory)
    return t


def first(t: QueueTree, left: str, lreq: float, right: str, rreq: float) -> str:
    c = compare_queues(t.nodes[left], Resources(gpu=lreq), t.nodes[right], Resources(gpu=rreq), TOTAL)
    return left if c < 0 else right


def test_a_job_that_keeps_its_queue_within_quota_goes_first():
    # q1 is further below its share, but its 2-GPU job would pass its quota of 1; q2's job fits in q2's.
    t = tree(("q1", 1, 0, 4), ("q2", 4, 3, 4))
    assert first(t, "q1", 2, "q2", 1) == "q2" and first(t, "q2", 1, "q1", 2) == "q2"


def test_ties_go_to_the_smaller_share_not_the_name():
    t = tree(("a", 4, 3, 4), ("b", 4, 1, 4))
    assert first(t, "a", 1, "b", 1) == "b"  # 1 of 4 before 3 of 4
    t = tree(("a", 8, 0, 8), ("b", 2, 0, 2))
    assert first(t, "a", 2, "b", 0.5) == "b"  # equal shares, with the job and without: the weaker queue


def test_a_queue_over_its_fair_share_goes_last():
    t = tree(("a", 0, 5, 4), ("z", 0, 0, 4))
    t.nodes["a"].allocated = Resources(gpu=5, cpu=TOTAL.cpu + 1, memory=TOTAL.memory + 1)  # over in all
    assert first(t, "a", 1, "z", 1) == "z"


def test_the_budget_counts_work_and_the_live_scheduler_adds_a_clock():
    budget = Budget(BudgetLimits(action_work=5, job_work=3))
    action = budget.action()
    job = budget.job(action)
    for _ in range(3):
        assert not job.exhausted
        job.spend()
    assert job.exhausted and not action.exhausted and action.left == 2  # the job's work is the action's too
    assert budget.job(action).left == 2  # a job never gets more than its action has left
    now = [0.0]
    live = Budget(BudgetLimits(action_work=1000, wall_s=0.25), clock=lambda: now[0]).action()
    assert not live.exhausted
    now[0] = 0.3
    assert live.exhausted  # the live scheduler's cap: work left, but the cycle must end
