"""Verdicts: why pods wait, typed for the actions, made into one message per pod at report time."""

from __future__ import annotations

from scheduler.api.gpu_request import GPURequest
from scheduler.framework.verdicts import Verdicts
from scheduler.model.reasons import PendingReason, Reason, Wait
from scheduler.model.types import PodInfo


def _pod(name: str) -> PodInfo:
    return PodInfo(name, "ns", name, "q", 50, True, GPURequest())


def test_findings_are_joined_once_each_when_reported() -> None:
    a, b = _pod("a"), _pod("b")
    v = Verdicts()
    v.tell(a, Reason.UNSCHEDULABLE, "no node fits 1 GPU")
    v.note(a, "even empty, this cluster could hold 0")
    v.note(a, "even empty, this cluster could hold 0")  # the same finding from a later action: once
    v.note(a, "even empty")  # a different finding, though its words are part of another one: kept
    v.note(b, "a note on nothing")  # no verdict, none made
    assert v.reports() == {
        "a": PendingReason(
            Reason.UNSCHEDULABLE, "no node fits 1 GPU; even empty, this cluster could hold 0; even empty"
        )
    }
    v.note(b, "even empty, this cluster could hold 0", otherwise=Reason.UNSCHEDULABLE)
    assert v.wait(b) is Wait.ROOM and v.wait(_pod("c")) is None


def test_a_later_action_gives_its_reason_and_leads_or_follows() -> None:
    a = _pod("a")
    v = Verdicts()
    v.tell(a, Reason.FRAGMENTED, "fragmentation")
    v.retell(a, Reason.WAITING_FOR_RECLAIM, "waiting for reclaim")
    v.retell(a, Reason.WAITING_FOR_MIN_RUNTIME, "too young", first=True)
    got = v.get("a")
    assert got is not None and got.reason is Reason.WAITING_FOR_MIN_RUNTIME
    assert got.message() == "too young; fragmentation; waiting for reclaim"
    v.clear(a)
    assert "a" not in v and len(v) == 0
