"""Time-based fair share in the division of over-quota resources: KAI Scheduler's portion formula
(docs/fairshare.md)."""

from __future__ import annotations

import pytest

from scheduler.api.queue import Queue
from scheduler.model.resources import Resources
from scheduler.queues import QueueTree, compute_fair_shares
from scheduler.queues.fairshare import portions


def tree(*queues: tuple[str, float, float], requested: float = 100.0) -> QueueTree:
    """Queues (name, GPU quota, weight) that each request `requested` GPUs."""
    t = QueueTree([
        Queue.model_validate({"metadata": {"name": n},
                              "spec": {"resources": {"gpu": {"quota": q, "overQuotaWeight": w}}}})
        for n, q, w in queues
    ])  # fmt: skip
    t.roll_up({}, {n: Resources(gpu=requested, cpu=1, memory=1) for n, _, _ in queues})
    return t


def gpu_shares(t: QueueTree) -> dict[str, float]:
    return {n: round(node.fair_share.gpu, 3) for n, node in t.nodes.items() if n != "default"}


def test_kai_portion_formula() -> None:
    """P_i = max(0, W'_i + k (W'_i - U'_i)), normalised over the queues of the round (KAI's
    time-based-fairshare design): weights 1 and 3, usage 0.1 and 0.6, k = 1."""
    t = tree(("a", 0, 1), ("b", 0, 3))
    active = [t.nodes["a"], t.nodes["b"]]
    usage = {"a": Resources(gpu=0.1), "b": Resources(gpu=0.6)}
    p_a, p_b = max(0.0, 0.25 + (0.25 - 0.1)), max(0.0, 0.75 + (0.75 - 0.6))
    got = portions(active, "gpu", usage, 1.0)
    assert got["a"] == pytest.approx(p_a / (p_a + p_b)) and got["b"] == pytest.approx(p_b / (p_a + p_b))
    assert portions(active, "gpu", None, 1.0) == {"a": 0.25, "b": 0.75}  # off: the weights
    assert portions(active, "gpu", usage, 0.0) == {"a": 0.25, "b": 0.75}  # k = 0: the weights
    heavy = {"a": Resources(gpu=1.0), "b": Resources(gpu=1.0)}
    assert portions(active, "gpu", heavy, 10.0) == {"a": 0.25, "b": 0.75}  # every P is 0: the weights


def test_usage_lowers_the_over_quota_share_never_the_quota() -> None:
    t = tree(("a", 2, 1), ("b", 2, 1))
    compute_fair_shares(t, Resources(gpu=8, cpu=1, memory=1))
    assert gpu_shares(t) == {"a": 4.0, "b": 4.0}
    usage = {"a": Resources(gpu=0.2), "b": Resources(gpu=0.8)}
    compute_fair_shares(t, Resources(gpu=8, cpu=1, memory=1), usage, 1.0)
    # 2 each deserved, the 4 left split 0.8 : 0.2 (P = 0.5 + 0.3 and 0.5 - 0.3)
    assert gpu_shares(t) == {"a": 2 + 3.2, "b": 2 + 0.8}
    compute_fair_shares(t, Resources(gpu=8, cpu=1, memory=1), usage, 100.0)
    assert gpu_shares(t) == {"a": 6.0, "b": 2.0}  # b gets nothing over quota, keeps its quota
