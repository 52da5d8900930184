"""Fuzz: `admit()` answers every review, well-formed or not, with an AdmissionReview; it never raises and
never fails internally (code 500). Whatever it admits parses with the scheduler's parser inside the
bounds. Long run: see tests/api/hostile.py."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from scheduler.api.limits import MAX_GPUS_PER_NODE
from scheduler.model.parse import parse_pod
from scheduler.webhook.admission import AdmissionConfig, admit
from tests.api.hostile import fuzz_settings, hostile_pod, json_value

QUEUES = {"team-a": "leaf", "default": "leaf", "org": "parent"}
CFG = AdmissionConfig(queue_lookup=QUEUES.get)  # type: ignore[arg-type]
USERS = st.sampled_from(
    ["alice", "system:serviceaccount:tessera-system:tessera-scheduler",
     "system:serviceaccount:tessera-system:tessera-device-plugin", ""]
)  # fmt: skip


@st.composite
def reviews(draw: st.DrawFn) -> Any:
    pod = draw(hostile_pod())
    request: dict[str, Any] = {
        "uid": draw(st.text(max_size=8)),
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"])),
        "userInfo": {"username": draw(USERS)},
        "object": pod,
    }
    if request["operation"] == "UPDATE":
        request["oldObject"] = draw(st.one_of(st.just(copy.deepcopy(pod)), hostile_pod()))
    body: dict[str, Any] = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": request,
    }
    if draw(st.integers(0, 4)) == 0:  # break the review itself somewhere
        holder = draw(st.sampled_from([body, request, request["kind"], request["userInfo"]]))
        key = draw(st.sampled_from(sorted(holder)))
        if draw(st.booleans()):
            del holder[key]
        else:
            holder[key] = draw(json_value)
    return draw(st.one_of(st.just(body), st.just(body), json_value))


@fuzz_settings()
@given(reviews())
def test_admit_never_raises_and_never_fails_internally(review: Any) -> None:
    answer = admit(review, CFG)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    res = answer["response"]
    assert isinstance(res["allowed"], bool)
    if not res["allowed"]:
        assert res["status"]["code"] in (400, 403), res["status"]
        assert "\n" not in res["status"]["message"]
    request = review.get("request") if isinstance(review, dict) else None
    if isinstance(request, dict) and isinstance(request.get("uid"), str):
        assert res["uid"] == request["uid"]


@fuzz_settings()
@given(hostile_pod())
def test_what_create_admits_the_scheduler_accepts(pod: dict[str, Any]) -> None:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u", "kind": {"kind": "Pod"}, "resource": {"resource": "pods"},
                    "operation": "CREATE", "userInfo": {"username": "alice"}, "object": pod},
    }  # fmt: skip
    res = admit(review, CFG)["response"]
    spec = pod.get("spec")
    if not res["allowed"] or not isinstance(spec, dict) or spec.get("schedulerName") != "tessera":
        return
    info = parse_pod(pod)
    assert info.error is None, info.error
    assert info.request.num_devices <= MAX_GPUS_PER_NODE
    assert not (info.node and info.request.kind != "none"), "a GPU pod with a preset node was admitted"
