"""Fair share by KAI's rules: deserved quota first, then priority buckets by overQuotaWeight, capped."""

import pytest

from scheduler.api.queue import Queue
from scheduler.model.resources import Resources
from scheduler.queues import QueueTree, compute_fair_shares
from tests.framework.helpers import queue


def tree_of(*queues: dict, requested: dict[str, float]) -> QueueTree:
    tree = QueueTree([Queue.model_validate(q) for q in queues])
    tree.roll_up({}, {name: Resources(gpu=g) for name, g in requested.items()})
    return tree


def gpu_shares(tree: QueueTree, capacity: float) -> dict[str, float]:
    compute_fair_shares(tree, Resources(gpu=capacity))
    return {name: round(node.fair_share.gpu, 6) for name, node in tree.nodes.items()}


def test_quota_first_then_weights_capped_by_request():
    tree = tree_of(queue("a", None, 10, weight=2), queue("b", None, 10, weight=1), queue("c", None, 0, weight=1),
                   requested={"a": 100, "b": 12, "c": 100})  # fmt: skip
    s = gpu_shares(tree, 50)
    # 20 deserved (a 10, b 10); 30 over quota by 2:1:1, b capped at 12 (gets 2), the rest 2:1 to a and c.
    assert s["b"] == 12 and s["a"] == pytest.approx(10 + 28 * 2 / 3) and s["c"] == pytest.approx(28 / 3)


def test_higher_priority_bucket_is_served_first_and_limit_caps():
    tree = tree_of(queue("hi", None, 0, limit=6, priority=200), queue("lo1", None, 0), queue("lo2", None, 0, weight=3),
                   requested={"hi": 50, "lo1": 50, "lo2": 50})  # fmt: skip
    s = gpu_shares(tree, 22)
    assert s["hi"] == 6  # all it may take (limit), before the lower bucket sees anything
    assert s["lo1"] == pytest.approx(4) and s["lo2"] == pytest.approx(12)


def test_hierarchy_divides_the_parent_share():
    tree = tree_of(
        queue("org1", None, 8), queue("org2", None, 8),
        queue("t1", "org1", 4, weight=1), queue("t2", "org1", 4, weight=3), queue("t3", "org2", 8),
        requested={"t1": 20, "t2": 20, "t3": 2},
    )  # fmt: skip
    s = gpu_shares(tree, 24)
    assert s["org2"] == 2 and s["t3"] == 2  # org2 asks only 2: the rest goes to org1
    assert (
        s["org1"] == 22 and s["t1"] == pytest.approx(4 + 14 / 4) and s["t2"] == pytest.approx(4 + 14 * 3 / 4)
    )


def test_oversubscribed_quota_is_scaled_down_by_priority_then_in_proportion():
    tree = tree_of(queue("a", None, 6), queue("b", None, 2), queue("vip", None, 4, priority=200),
                   requested={"a": 10, "b": 10, "vip": 10})  # fmt: skip
    s = gpu_shares(tree, 10)
    assert s["vip"] == 4 and s["a"] == pytest.approx(4.5) and s["b"] == pytest.approx(1.5)


def test_unlimited_quota_deserves_all_it_requests():
    tree = tree_of(queue("a", None, -1), queue("b", None, 2), requested={"a": 7, "b": 9})
    s = gpu_shares(tree, 10)
    assert s["a"] == 7 and s["b"] == 3
