"""A gang member that cannot be read stays in its gang: the gang is all or nothing, so it waits for that
member (told why) instead of starting without it. An unreadable pod used to leave its gang (it had no
group), and a gang without a PodGroup, whose minMember is the members it has, then started short."""

from __future__ import annotations

import copy
from typing import Any

from scheduler.api.keys import POD_GROUP
from scheduler.sim.cluster import SimCluster
from tests.framework.helpers import A100, assert_arrays_match_world, cluster, node, phase, pod, run


def _member(name: str) -> dict[str, Any]:
    return pod(name, "default", arrival_s=0, duration_s=10_000, gpus=1, annotations={POD_GROUP: "g"})


def _reason(sim: SimCluster, key: str) -> tuple[str, str]:
    why = sim.pods[key].reason
    assert why is not None, f"{key} was told nothing"
    return why


def test_a_gang_with_an_unreadable_member_waits_for_it_whole() -> None:
    sim, sched = cluster([node("n0", A100, 2, 64, 512)])
    bad = _member("w0")
    bad["metadata"]["labels"] = ["not", "a", "map"]
    sim.submit_pod(bad)
    sim.submit_pod(_member("w1"))
    run(sim, sched, cycles=2)
    assert phase(sim, "default/w0") == phase(sim, "default/w1") == "Pending"
    assert _reason(sim, "default/w0")[0] == "InvalidRequest"
    reason, message = _reason(sim, "default/w1")
    assert reason == "GangIncomplete" and "default/w0 is invalid" in message, message
    fixed = copy.deepcopy(sim.pods["default/w0"].obj)
    fixed["metadata"]["labels"] = {}
    sim.update_object("Pod", fixed)
    run(sim, sched, cycles=2)
    assert phase(sim, "default/w0") == phase(sim, "default/w1") == "Running"
    assert_arrays_match_world(sim, sched)


def test_a_member_whose_annotations_turn_unreadable_stays_in_its_gang() -> None:
    sim, sched = cluster([node("n0", A100, 1, 64, 512)])
    sim.submit_pod(_member("w0"))
    sim.submit_pod(_member("w1"))
    run(sim, sched)  # two GPUs needed, one there: the gang waits
    assert phase(sim, "default/w0") == phase(sim, "default/w1") == "Pending"
    broken = copy.deepcopy(sim.pods["default/w0"].obj)
    broken["metadata"]["annotations"] = ["not", "a", "map"]  # its pod-group annotation cannot be read
    sim.update_object("Pod", broken)
    run(sim, sched)
    sim.add_object("Node", node("n1", A100, 1, 64, 512))  # room for both now
    run(sim, sched, cycles=2)
    assert phase(sim, "default/w1") == "Pending"  # not started without its unreadable member
    assert "default/w0 is invalid" in _reason(sim, "default/w1")[1]
    assert _reason(sim, "default/w0")[0] == "InvalidRequest"
    assert_arrays_match_world(sim, sched)
