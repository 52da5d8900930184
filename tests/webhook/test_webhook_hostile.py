"""The webhook against what issue 14 found: hostile numbers admitted, UPDATE never validated, a bound pod
relabelled into another queue, pods that take GPUs the scheduler never gave them, a user-written
`tessera.dev/gpu-allocated`, reviews that made `admit()` raise."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from scheduler.api.serving import Request
from scheduler.webhook.admission import AdmissionConfig, admit
from scheduler.webhook.server import webhook_handler
from tests.webhook.test_webhook_admission import CONFIG, REVIEW, SCHEDULER_SA, review

PLUGIN_SA = "system:serviceaccount:tessera-system:tessera-device-plugin"
CFG = AdmissionConfig(
    privileged_users=CONFIG.privileged_users,
    allocation_writers=frozenset({PLUGIN_SA}),
    queue_lookup=CONFIG.queue_lookup,
)


def answer(body: dict[str, Any], config: AdmissionConfig = CFG) -> dict[str, Any]:
    result: dict[str, Any] = admit(body, config)["response"]
    return result


def refused(body: dict[str, Any], needle: str) -> None:
    res = answer(body)
    assert not res["allowed"], res
    assert needle in res["status"]["message"], res["status"]["message"]
    assert "\n" not in res["status"]["message"]


def update(user: str = "alice@example.com", *, bound: bool = False) -> dict[str, Any]:
    body = review(operation="UPDATE", userInfo={"username": user})
    body["request"]["oldObject"] = copy.deepcopy(body["request"]["object"])
    if bound:
        for obj in (body["request"]["object"], body["request"]["oldObject"]):
            obj["spec"]["nodeName"] = "n1"
    return body


def new_pod(**changes: Any) -> dict[str, Any]:
    body = review()
    pod = body["request"]["object"]
    for key, value in changes.items():
        if key == "annotations":
            pod["metadata"]["annotations"] = value
        elif key == "limits":
            pod["spec"]["containers"][0]["resources"]["limits"].update(value)
        else:
            pod["spec"][key] = value
    return body


@pytest.mark.parametrize(
    ("annotations", "limits", "needle"),
    [
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "9" * 4000}, {}, "is not a whole number"),
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "9" * 19}, {}, "must be at most 64"),
        ({}, {"nvidia.com/gpu": "9" * 19}, "is more than the largest value accepted (64)"),
        ({}, {"cpu": "1e17"}, "invalid pod: "),
        ({"gpu-fraction": "٠.٥"}, {}, "is not a number"),
        ({"gpu-memory": "1_000"}, {}, "is not a whole number"),
    ],
)
def test_create_uses_the_schedulers_parser_and_bounds(
    annotations: dict[str, str], limits: dict[str, str], needle: str
) -> None:
    refused(new_pod(annotations=annotations, limits=limits), needle)


def test_anything_else_the_scheduler_would_refuse_is_refused() -> None:
    refused(new_pod(priority=2**31), "spec.priority=2147483648 is not a 32-bit integer")


def test_a_bound_pods_queue_label_cannot_change() -> None:
    for label in ("tessera.dev/queue", "kai.scheduler/queue"):
        body = update(bound=True)
        body["request"]["object"]["metadata"]["labels"][label] = "nope"
        refused(body, "the queue of a bound pod cannot change")
    body = update(bound=True)
    body["request"]["object"]["metadata"]["labels"]["tessera.dev/queue"] = "default"  # an existing leaf
    refused(body, "the queue of a bound pod cannot change")
    body = update(bound=True)
    body["request"]["object"]["metadata"]["labels"]["team"] = "x"  # other labels are free
    assert answer(body)["allowed"]


def test_a_pending_pods_new_queue_must_exist() -> None:
    body = update()
    body["request"]["object"]["metadata"]["labels"]["tessera.dev/queue"] = "nope"
    refused(body, 'queue "nope"')
    body["request"]["object"]["metadata"]["labels"]["tessera.dev/queue"] = "default"
    assert answer(body)["allowed"]


def test_gpu_request_annotations_cannot_be_added_later() -> None:
    body = update()
    body["request"]["object"]["metadata"]["annotations"]["gpu-fraction-num-devices"] = "9" * 4000
    refused(body, "cannot change after the pod was created: gpu-fraction-num-devices")


@pytest.mark.parametrize("scheduler", ["default-scheduler", None])
def test_gpu_slice_only_for_tessera_pods(scheduler: str | None) -> None:
    body = new_pod(annotations={}, limits={"tessera.dev/gpu-slice": "1"})
    if scheduler is None:
        del body["request"]["object"]["spec"]["schedulerName"]
    else:
        body["request"]["object"]["spec"]["schedulerName"] = scheduler
    refused(body, "served only to pods placed by the Tessera scheduler")
    init = new_pod(annotations={}, schedulerName="default-scheduler")
    spec = init["request"]["object"]["spec"]
    spec["initContainers"] = [
        {"name": "i", "image": "x", "resources": {"requests": {"tessera.dev/gpu-slice": "1"}}}
    ]
    refused(init, "served only to pods placed by the Tessera scheduler")


def test_no_preset_node_for_a_gpu_pod() -> None:
    refused(new_pod(nodeName="n1"), "remove spec.nodeName (n1)")  # gpu-fraction 0.5
    refused(new_pod(annotations={}, limits={"nvidia.com/gpu": "1"}, nodeName="n1"), "remove spec.nodeName")
    slice_ = new_pod(annotations={}, limits={"tessera.dev/gpu-slice": "1"}, nodeName="n1")
    slice_["request"]["object"]["spec"]["schedulerName"] = "default-scheduler"
    refused(slice_, "tessera.dev/gpu-slice")
    assert answer(new_pod(annotations={}, nodeName="n1"))["allowed"]  # no GPU: nothing to take


def test_the_slice_request_the_api_server_copies_from_the_limit_is_accepted() -> None:
    body = new_pod()
    body["request"]["object"]["spec"]["containers"][0]["resources"] = {
        "limits": {"tessera.dev/gpu-slice": "1"},
        "requests": {"tessera.dev/gpu-slice": "1"},
    }
    assert answer(body)["allowed"]
    body["request"]["object"]["spec"]["containers"][0]["resources"]["requests"]["tessera.dev/gpu-slice"] = "2"
    refused(body, "disagrees with the GPU request")


def test_a_slice_limit_without_a_fractional_request_is_refused() -> None:
    refused(new_pod(annotations={}, limits={"tessera.dev/gpu-slice": "1"}), "for gpu-fraction and gpu-memory")
    two = new_pod()
    two["request"]["object"]["spec"]["containers"][1]["resources"] = {
        "limits": {"tessera.dev/gpu-slice": "1"}
    }
    refused(two, "disagrees with the GPU request")


def test_only_the_device_plugin_marks_a_pod_allocated() -> None:
    body = new_pod(annotations={"gpu-fraction": "0.5", "tessera.dev/gpu-allocated": "2026-01-01T00:00:00Z"})
    refused(body, "only Tessera's device plugin may set annotation tessera.dev/gpu-allocated")
    for user, allowed in (("alice@example.com", False), (SCHEDULER_SA, False), (PLUGIN_SA, True)):
        body = update(user, bound=True)
        body["request"]["object"]["metadata"]["annotations"]["tessera.dev/gpu-allocated"] = "now"
        assert answer(body)["allowed"] is allowed, user
    forged = update(PLUGIN_SA, bound=True)  # the plugin may not write the scheduler's decision
    forged["request"]["object"]["metadata"]["annotations"]["tessera.dev/gpu-assignment"] = "{}"
    refused(forged, "only the Tessera scheduler may set annotation tessera.dev/gpu-assignment")


MALFORMED: list[Any] = [
    None, "text", 7, [], {}, {"request": None}, {"request": []},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 5}},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "kind": "Pod"}},
]  # fmt: skip


@pytest.mark.parametrize("bad", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_reviews_get_a_400_review_answer(bad: Any) -> None:
    res = admit(bad, CFG)
    assert res["kind"] == "AdmissionReview" and res["response"]["status"]["code"] == 400


@pytest.mark.parametrize(
    ("where", "value"),
    [("metadata", []), ("metadata", {"annotations": []}), ("metadata", {"labels": "x"}),
     ("spec", {"containers": "abc"}), ("spec", {"containers": [1, 2]}),
     ("spec", {"schedulerName": "tessera", "containers": [{"resources": {"limits": []}}]}),
     ("spec", {"schedulerName": "tessera", "containers": [{"resources": {"limits": {"nvidia.com/gpu": [1]}}}]}),
     ("spec", {"schedulerName": "tessera", "containers": [{"resources": []}]})],
)  # fmt: skip
def test_wrongly_shaped_pods_are_refused_not_raised(where: str, value: Any) -> None:
    for operation in ("CREATE", "UPDATE"):
        body = review(operation=operation)
        body["request"]["object"][where] = value
        if operation == "UPDATE":
            body["request"]["oldObject"] = copy.deepcopy(REVIEW["request"]["object"])
        res = answer(body)
        assert not res["allowed"] or operation == "UPDATE"
        assert res.get("status", {}).get("code") != 500


@pytest.mark.parametrize(
    "body",
    [b"", b"{not json", b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000, b"null", b'"x"', b"1e999999"],
)
def test_every_body_gets_an_admission_review_answer(body: bytes) -> None:
    handle = webhook_handler(CFG)
    resp = handle(Request("POST", "/validate-pods", {}, "/validate-pods", {}, body))
    assert resp.status == 200
    review_answer = json.loads(resp.body)
    assert review_answer["kind"] == "AdmissionReview"
    assert (
        review_answer["response"]["allowed"] is False and review_answer["response"]["status"]["code"] == 400
    )
