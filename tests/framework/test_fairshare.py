"""Fair share: deserved quota first, then priority buckets split by overQuotaWeight, capped by request/limit."""

import pytest

from scheduler.api.meta import ObjectMeta
from scheduler.api.queue import Queue, QueueResource, QueueResources, QueueSpec
from scheduler.model.resources import Resources
from scheduler.queues import QueueTree, compute_fair_shares


def q(name, quota=0.0, weight=1.0, limit=-1.0, parent=None, priority=100):
    return Queue(
        metadata=ObjectMeta(name=name),
        spec=QueueSpec(
            parent_queue=parent, priority=priority,
            resources=QueueResources(gpu=QueueResource(quota=quota, over_quota_weight=weight, limit=limit)),
        ),
    )  # fmt: skip


def shares(queues, demand, capacity):
    tree = QueueTree(queues)
    tree.roll_up({}, {k: Resources(gpu=v) for k, v in demand.items()})
    compute_fair_shares(tree, Resources(gpu=capacity))
    return {n: round(node.fair_share.gpu, 6) for n, node in tree.nodes.items()}


def test_quota_first_then_weights():
    s = shares([q("a", 10, weight=1), q("b", 10, weight=3)], {"a": 100, "b": 100}, 60)
    assert s["a"] == pytest.approx(20) and s["b"] == pytest.approx(40)  # 10+10, then 40 split 1:3


def test_request_caps_share_and_leftover_goes_to_others():
    s = shares([q("a", 10), q("b", 10)], {"a": 4, "b": 100}, 60)
    assert s["a"] == 4 and s["b"] == 56


def test_limit_caps_share():
    s = shares([q("a", 10, limit=15), q("b", 10)], {"a": 100, "b": 100}, 60)
    assert s["a"] == 15 and s["b"] == 45


def test_higher_priority_bucket_takes_over_quota_first():
    s = shares([q("hi", 5, priority=200), q("lo", 5, weight=10)], {"hi": 50, "lo": 50}, 40)
    assert s["hi"] == 35 and s["lo"] == 5


def test_short_capacity_splits_quota_in_proportion():
    s = shares([q("a", 30), q("b", 10)], {"a": 30, "b": 10}, 20)
    assert s["a"] == 15 and s["b"] == 5


def test_zero_weight_gets_no_over_quota():
    s = shares([q("a", 5, weight=0), q("b", 5)], {"a": 50, "b": 50}, 30)
    assert s["a"] == 5 and s["b"] == 25


def test_hierarchy_divides_parent_share():
    queues = [q("org", 20), q("t1", 15, parent="org"), q("t2", 5, weight=1, parent="org"), q("other", 20)]
    s = shares(queues, {"t1": 100, "t2": 100, "other": 5}, 60)
    assert s["org"] == 55 and s["other"] == 5
    assert s["t1"] == pytest.approx(15 + 17.5) and s["t2"] == pytest.approx(5 + 17.5)


def test_bad_links_are_reported_not_fatal():
    tree = QueueTree([q("a", parent="missing"), q("x", parent="y"), q("y", parent="x")])
    assert any("does not exist" in e for e in tree.errors) and any("loops" in e for e in tree.errors)
    assert tree.leaf_error("default") is None  # always present
    assert "does not exist" in (tree.leaf_error("nope") or "")
