"""One bad object never stops scheduling (issue 14): whatever fails while one pod, node, queue, pod group or
job is handled marks that object, and the cycle goes on for everyone else (scheduler/cache/containment.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scheduler.actions.allocate import Allocate
from scheduler.api.keys import GPU_MEMORY_LABEL, POD_GROUP
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.framework.session import Session
from scheduler.model.types import PodInfo
from scheduler.placement import registry
from scheduler.placement.level_policy import BinpackPolicy
from scheduler.placement.policy import Array
from scheduler.queues.charge import GPUCharge
from scheduler.sim.cluster import SimCluster
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays
from tests.framework.helpers import (
    A100,
    assert_arrays_match_world,
    cluster,
    node,
    phase,
    pod,
    podgroup,
    queue,
    run,
)


def _pod(name: str, fraction: str = "0.5", **kw: Any) -> dict[str, Any]:
    return pod(name, "default", arrival_s=0, duration_s=10_000, annotations={"gpu-fraction": fraction}, **kw)


def _reason(sim: SimCluster, key: str) -> tuple[str, str]:
    why = sim.pods[key].reason
    assert why is not None, f"{key} was told nothing"
    return why


class BrokenForOneShape(BinpackPolicy):
    """A policy with a bug that only one request shape (0.123 of a GPU) hits."""

    def pick_gpus(self, state: NodeArrays, row: int, d: PodDemand, fit: Array) -> list[int]:
        if d.gpu_milli == 123:
            raise OverflowError("int too large to convert to C long")
        return super().pick_gpus(state, row, d, fit)


def test_an_action_failing_on_one_job_schedules_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._REGISTRY, "broken", BrokenForOneShape)
    sim, sched = cluster([node("n0", A100, 2, 64, 512)], policy="broken")
    sim.submit_pod(_pod("a"))
    sim.submit_pod(_pod("bad", "0.123"))
    sim.submit_pod(_pod("b"))
    sim.add_object("PodGroup", podgroup("g", "default", "default", 2))
    for i in range(2):
        sim.submit_pod(pod(f"g{i}", "default", arrival_s=0, duration_s=10_000,
                           annotations={"gpu-fraction": "0.25", POD_GROUP: "g"}))  # fmt: skip
    run(sim, sched, cycles=2)
    assert [phase(sim, f"default/{n}") for n in ("a", "b", "g0", "g1")] == ["Running"] * 4
    reason, message = _reason(sim, "default/bad")
    assert reason == "InvalidRequest" and "OverflowError" in message and "\n" not in message
    assert any("OverflowError" in e for e in sched.cache.errors)
    assert_arrays_match_world(sim, sched)
    # Quarantined until it changes, tried again after a backoff that doubles: 30 cycles, 4 more tries.
    errors = sched.cache.error_log.total
    run(sim, sched, cycles=30)
    assert sched.cache.error_log.total - errors == 4 and _reason(sim, "default/bad")[0] == "InvalidRequest"
    bad = copy.deepcopy(sim.pods["default/bad"].obj)
    bad["metadata"]["annotations"]["gpu-fraction"] = "0.25"  # fixed: tried at once
    sim.update_object("Pod", bad)
    run(sim, sched)
    assert phase(sim, "default/bad") == "Running"


def test_a_failing_gang_member_leaves_the_gang_out_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._REGISTRY, "broken", BrokenForOneShape)
    sim, sched = cluster([node("n0", A100, 2, 64, 512)], policy="broken")
    sim.add_object("PodGroup", podgroup("g", "default", "default", 2))
    sim.submit_pod(pod("g0", "default", arrival_s=0, duration_s=10_000,
                       annotations={"gpu-fraction": "0.5", POD_GROUP: "g"}))  # fmt: skip
    sim.submit_pod(pod("g1", "default", arrival_s=0, duration_s=10_000,
                       annotations={"gpu-fraction": "0.123", POD_GROUP: "g"}))  # fmt: skip
    sim.submit_pod(_pod("single"))
    run(sim, sched, cycles=2)
    assert phase(sim, "default/single") == "Running"
    assert phase(sim, "default/g0") == phase(sim, "default/g1") == "Pending"  # never half a gang
    assert _reason(sim, "default/g0")[0] == _reason(sim, "default/g1")[0] == "InvalidRequest"
    assert_arrays_match_world(sim, sched)


def test_a_failure_while_the_session_opens_is_kept_to_its_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's critical case: one pod made `Session.open` raise every cycle and nobody was bound."""
    real = GPUCharge.__call__

    def charge(self: GPUCharge, p: PodInfo) -> Any:  # what a pending pod counts, asked in Session.open
        if p.name == "bad":
            raise OverflowError("cannot convert float infinity to integer")
        return real(self, p)

    monkeypatch.setattr(GPUCharge, "__call__", charge)
    sim, sched = cluster([node("n0", A100, 2, 64, 512)])
    for name in ("a", "bad", "b"):
        sim.submit_pod(_pod(name))
    run(sim, sched, cycles=2)
    assert phase(sim, "default/a") == phase(sim, "default/b") == "Running"
    assert _reason(sim, "default/bad")[0] == "InvalidRequest"


def test_an_action_failing_on_no_job_is_skipped_and_the_rest_goes_on() -> None:
    class Broken:
        name = "broken"

        def execute(self, session: Session, cluster: object) -> None:
            raise KeyError("bookkeeping")

    sim, sched = cluster([node("n0", A100, 1, 64, 512)])
    sched.actions = [Broken(), Allocate()]
    sim.submit_pod(_pod("a"))
    run(sim, sched)
    assert phase(sim, "default/a") == "Running"
    assert any("action broken skipped this cycle" in e for e in sched.cache.errors)


class ReportingFails(SimCluster):
    def report_pending(self, pod: PodInfo, reason: str, message: str) -> None:
        if pod.name == "first":
            raise RuntimeError("the API server refused the status patch")
        super().report_pending(pod, reason, message)


def test_reporting_one_pod_failing_still_reports_the_others_and_the_status() -> None:
    sim = ReportingFails()
    for o in (node("n0", A100, 1, 64, 512), queue("default", None, 1)):
        sim.add_object(o["kind"], o)
    sched = Scheduler(sim, SchedulerConfig(backend="numpy"))
    for name in ("first", "second"):
        sim.submit_pod(pod(name, "default", arrival_s=0, duration_s=10, gpus=4))
    run(sim, sched)
    assert sim.pods["default/first"].reason is None
    assert _reason(sim, "default/second")[0] == "Unschedulable"
    assert "default" in sim.queue_status  # the status was still published
    assert any("the API server refused the status patch" in e for e in sched.cache.errors)


def test_a_pod_of_the_wrong_shape_is_pending_with_its_reason() -> None:
    sim, sched = cluster([node("n0", A100, 1, 64, 512)])
    bad = _pod("bad")
    bad["metadata"]["labels"] = ["not", "a", "map"]
    bad["spec"]["containers"][0]["resources"] = "lots"
    sim.submit_pod(bad)
    sim.submit_pod(_pod("good"))
    run(sim, sched)
    assert phase(sim, "default/good") == "Running"
    reason, message = _reason(sim, "default/bad")
    assert reason == "InvalidRequest" and message


def test_a_node_that_becomes_unreadable_takes_no_pod_and_keeps_its_pods() -> None:
    n0 = node("n0", A100, 1, 64, 512)
    sim, sched = cluster([n0])
    sim.submit_pod(_pod("a"))
    run(sim, sched)
    broken = copy.deepcopy(n0)
    broken["metadata"]["labels"][GPU_MEMORY_LABEL] = "lots"
    sim.update_object("Node", broken)
    sim.submit_pod(_pod("b"))
    run(sim, sched, cycles=2)
    assert phase(sim, "default/a") == "Running" and phase(sim, "default/b") == "Pending"
    assert any("node n0 is unschedulable for Tessera" in w and "lots" in w for w in sim.warnings)
    assert_arrays_match_world(sim, sched)
    sim.update_object("Node", copy.deepcopy(n0))  # fixed: schedulable again
    run(sim, sched, cycles=2)
    assert phase(sim, "default/b") == "Running"
    assert "n0" not in sched.cache.mirror.problems.nodes


def _bad_queue(name: str) -> dict[str, Any]:
    q = queue(name, None, 1)
    q["spec"]["resources"]["gpu"]["quota"] = "plenty"
    return q


def test_an_invalid_queue_is_reported_on_its_pods_and_as_a_warning() -> None:
    sim, sched = cluster([node("n0", A100, 1, 64, 512), _bad_queue("team")])
    sim.submit_pod(pod("p", "team", arrival_s=0, duration_s=100, gpus=1))
    sim.submit_pod(_pod("other"))
    run(sim, sched)
    reason, message = _reason(sim, "team/p")
    assert reason == "InvalidQueue" and "queue team is invalid" in message and "quota" in message
    assert phase(sim, "default/other") == "Running"
    assert any("queue team is invalid" in w for w in sim.warnings)


def test_an_invalid_queue_update_keeps_the_last_valid_spec() -> None:
    sim, sched = cluster([node("n0", A100, 2, 64, 512), queue("team", None, 1, limit=1)])
    sim.submit_pod(pod("p", "team", arrival_s=0, duration_s=10_000, gpus=1))
    run(sim, sched)
    sim.update_object("Queue", _bad_queue("team"))
    sim.submit_pod(pod("q", "team", arrival_s=0, duration_s=10_000, gpus=1))
    run(sim, sched, cycles=2)
    assert phase(sim, "team/p") == "Running"
    assert _reason(sim, "team/q")[0] == "OverLimit"  # the last valid limit still holds
    assert "team" in sched.cache.mirror.problems.queues


def test_an_invalid_podgroup_keeps_its_pods_waiting_with_the_reason() -> None:
    sim, sched = cluster([node("n0", A100, 2, 64, 512)])
    group = podgroup("g", "default", "default", 2)
    group["spec"]["minMember"] = "two"
    sim.add_object("PodGroup", group)
    for i in range(2):
        sim.submit_pod(pod(f"g{i}", "default", arrival_s=0, duration_s=10_000,
                           annotations={"gpu-fraction": "0.5", POD_GROUP: "g"}))  # fmt: skip
    run(sim, sched)
    reason, message = _reason(sim, "default/g0")
    assert reason == "InvalidRequest" and "PodGroup default/g is invalid" in message
    sim.update_object("PodGroup", podgroup("g", "default", "default", 2))
    run(sim, sched, cycles=2)
    assert phase(sim, "default/g0") == phase(sim, "default/g1") == "Running"


class BindBreaksOn(SimCluster):
    """A cluster whose bind of one pod fails with something that is not a BindError (a bug, a library's
    exception): the pods bound before it in the same transaction are bound for real."""

    def bind(self, pod: PodInfo, assignment: Any) -> Any:
        if pod.name == "b":
            raise RuntimeError("connection pool is closed")
        return super().bind(pod, assignment)


def test_pods_bound_before_a_failure_are_never_overcommitted() -> None:
    sim = BindBreaksOn()
    sim.add_object("Node", node("n0", A100, 1, 64, 512))
    sched = Scheduler(sim, SchedulerConfig(backend="numpy"))
    sim.add_object("PodGroup", podgroup("g", "default", "default", 2))
    for name, fraction in (("a", "0.5"), ("b", "0.25")):
        sim.submit_pod(pod(name, "default", arrival_s=0, duration_s=10_000,
                           annotations={"gpu-fraction": fraction, POD_GROUP: "g"}))  # fmt: skip
    sim.advance(1)
    sim.submit_pod(_pod("c", "0.75"))
    for _ in range(3):
        run(sim, sched)
        assert_arrays_match_world(sim, sched)  # `a` is bound: its GPU is never given to `c` as well
    assert phase(sim, "default/c") == "Pending"


def test_a_failure_that_leaves_the_arrays_wrong_fails_the_cycle_for_a_rebuild() -> None:
    """Contained failures are followed by a check that the arrays equal the holdings: a failure that wrote
    them outside the ledger (nothing rolls that back) fails the cycle, so its caller rebuilds the state
    from the cluster (`SchedulerRunner.rebuild`) instead of giving the lost share away."""

    class Corrupts:
        name = "corrupts"

        def execute(self, session: Session, cluster: object) -> None:
            session.state.free_milli[0, 0] = 1000
            raise RuntimeError("boom")

    sim, sched = cluster([node("n0", A100, 1, 64, 512)])
    sim.submit_pod(_pod("a"))
    run(sim, sched)
    sched.actions = [Corrupts(), Allocate()]
    sim.advance(sim.now_s + 1)
    with pytest.raises(RuntimeError, match="boom"):
        sched.run_cycle()


class FailsOnAJob:
    """An action with a bug that fails while handling one job, after (optionally) writing the arrays
    directly, outside the ledger: nothing can roll that back."""

    name = "failing"

    def __init__(self, *, corrupt: bool) -> None:
        self.corrupt = corrupt

    def execute(self, session: Session, cluster: object) -> None:
        for job in session.pending_jobs:  # the traceback names the job through this frame's `job`
            for member in session.facts(job).pending:
                if member.name == "bad":
                    if self.corrupt:
                        session.state.free_milli[0, 0] -= 100
                    raise OverflowError("int too large to convert to C long")


@pytest.mark.parametrize("corrupt", [False, True])
def test_a_contained_failure_that_left_the_arrays_corrupt_fails_the_cycle(corrupt: bool) -> None:
    """A failure on one job is contained (the job quarantined, the others scheduled) only while the arrays
    still equal what the holdings explain; one that wrote them outside the ledger fails the cycle, so
    that its caller rebuilds the state from the cluster (the Kubernetes runner does: test_kube_e2e's
    test_a_failed_cycle_rebuilds_the_state_from_the_watch_caches) instead of scheduling on a corrupt one."""
    sim, sched = cluster([node("n0", A100, 1, 64, 512)])
    sched.actions = [FailsOnAJob(corrupt=corrupt), Allocate()]
    sim.submit_pod(_pod("bad"))
    sim.submit_pod(_pod("good"))
    if corrupt:
        with pytest.raises(OverflowError):
            run(sim, sched)
        return
    run(sim, sched)
    assert phase(sim, "default/good") == "Running"
    assert _reason(sim, "default/bad")[0] == "InvalidRequest"
    assert_arrays_match_world(sim, sched)
