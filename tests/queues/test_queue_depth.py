"""A queue tree deeper than MAX_QUEUE_DEPTH is reported, never a failure of the cycle (issue 27, finding 5:
a chain of ~400 queues made every action fail; 1,000 levels raised RecursionError out of the cycle).

The deep queues are left out, their pods told why (InvalidQueue) and the Queue warned about (QueueInvalid);
everyone else is scheduled as usual. A tree exactly MAX_QUEUE_DEPTH deep is used as any other.
"""

from __future__ import annotations

import pytest

from scheduler.api.limits import MAX_QUEUE_DEPTH
from tests.framework.helpers import A100, cluster, node, phase, pod, queue, run


def chain(levels: int, prefix: str = "q") -> list[dict]:
    """`levels` queues, each the parent of the next: q0 at the top, q{levels-1} the leaf."""
    return [queue(f"{prefix}{i}", f"{prefix}{i - 1}" if i else None, -1) for i in range(levels)]


@pytest.mark.parametrize("levels", [400, 1000])
def test_a_chain_of_queues_deeper_than_the_bound_is_reported_and_the_cycle_goes_on(levels: int) -> None:
    deep = pod("deep", f"q{levels - 1}", arrival_s=0, duration_s=100, gpus=1, namespace="default")
    shallow = pod("shallow", "team", arrival_s=0, duration_s=100, gpus=1, namespace="default")
    sim, sched = cluster(
        [node("n1", A100, 4, 32, 128), *chain(levels), queue("team", None, 1), deep, shallow]
    )
    run(sim, sched, cycles=2)
    assert phase(sim, "default/shallow") == "Running"
    assert phase(sim, "default/deep") == "Pending"
    reason, message = sim.pods["default/deep"].reason or ("", "")
    assert reason == "InvalidQueue"
    assert f"more than the {MAX_QUEUE_DEPTH} a queue tree may have" in message, message
    tree = sched.last_session.tree if sched.last_session else None
    assert (
        tree is not None
        and f"q{MAX_QUEUE_DEPTH - 1}" in tree.nodes
        and f"q{MAX_QUEUE_DEPTH}" not in tree.nodes
    )
    assert sum(f"queue q{levels - 1} is {levels} levels deep" in w for w in sim.warnings) == 1
    assert all("RecursionError" not in e and "skipped" not in e for e in sched.cache.errors)


def test_a_tree_as_deep_as_the_bound_is_used() -> None:
    leaf = pod("leaf", f"q{MAX_QUEUE_DEPTH - 1}", arrival_s=0, duration_s=100, gpus=1, namespace="default")
    sim, sched = cluster([node("n1", A100, 1, 32, 128), *chain(MAX_QUEUE_DEPTH), leaf])
    run(sim, sched)
    assert phase(sim, "default/leaf") == "Running"
    assert not sim.warnings
