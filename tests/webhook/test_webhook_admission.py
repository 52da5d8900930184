"""The admission webhook on real AdmissionReview v1 JSON, as the API server sends it."""

from __future__ import annotations

import base64
import copy
import json
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from scheduler.webhook.admission import AdmissionConfig, admit
from scheduler.webhook.server import WebhookServer

SCHEDULER_SA = "system:serviceaccount:tessera-system:tessera-scheduler"

# A CREATE review as kube-apiserver v1.30 sends it for `kubectl apply` of a pod.
REVIEW = json.loads("""
{
  "kind": "AdmissionReview",
  "apiVersion": "admission.k8s.io/v1",
  "request": {
    "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
    "kind": {"group": "", "version": "v1", "kind": "Pod"},
    "resource": {"group": "", "version": "v1", "resource": "pods"},
    "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
    "requestResource": {"group": "", "version": "v1", "resource": "pods"},
    "name": "infer-0",
    "namespace": "team-a",
    "operation": "CREATE",
    "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]},
    "object": {
      "apiVersion": "v1",
      "kind": "Pod",
      "metadata": {
        "name": "infer-0",
        "namespace": "team-a",
        "labels": {"tessera.dev/queue": "team-a"},
        "annotations": {"gpu-fraction": "0.5"}
      },
      "spec": {
        "schedulerName": "tessera",
        "containers": [
          {"name": "server", "image": "vllm/vllm-openai:v0.6.0",
           "resources": {"limits": {"cpu": "4", "memory": "16Gi"}, "requests": {"cpu": "2"}}},
          {"name": "sidecar", "image": "busybox"}
        ]
      }
    },
    "oldObject": null,
    "dryRun": false,
    "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1",
                "fieldManager": "kubectl-client-side-apply"}
  }
}
""")

QUEUES = {"team-a": "leaf", "default": "leaf", "org": "parent"}
CONFIG = AdmissionConfig(privileged_users=frozenset({SCHEDULER_SA}), queue_lookup=QUEUES.get)  # type: ignore[arg-type]


def review(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(REVIEW)
    for path, value in changes.items():
        node = body["request"]
        *parents, last = path.split("__")
        for part in parents:
            node = node[part]
        node[last] = value
    return body


def patched(answer: dict[str, Any], review_body: dict[str, Any]) -> dict[str, Any]:
    res = answer["response"]
    assert res["allowed"] and res["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(res["patch"]))
    return dict(jsonpatch.apply_patch(review_body["request"]["object"], patch))


def test_fractional_pod_gets_the_slice_limit_on_its_first_container() -> None:
    answer = admit(REVIEW, CONFIG)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == REVIEW["request"]["uid"]
    pod = patched(answer, REVIEW)
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {
        "cpu": "4",
        "memory": "16Gi",
        "tessera.dev/gpu-slice": "1",
    }
    assert "resources" not in pod["spec"]["containers"][1]


@pytest.mark.parametrize("resources", [None, {"requests": {"cpu": "1"}}])
def test_slice_limit_patch_shapes(resources: dict[str, Any] | None) -> None:
    body = review()
    container = body["request"]["object"]["spec"]["containers"][0]
    container.pop("resources")
    if resources is not None:
        container["resources"] = resources
    body["request"]["object"]["metadata"]["annotations"] = {
        "gpu-memory": "8192",
        "gpu-fraction-num-devices": "2",
    }
    pod = patched(admit(body, CONFIG), body)
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"tessera.dev/gpu-slice": "2"}


def test_whole_gpu_and_cpu_pods_pass_unchanged() -> None:
    body = review()
    body["request"]["object"]["metadata"]["annotations"] = {}
    body["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    answer = admit(body, CONFIG)["response"]
    assert answer["allowed"] and "patch" not in answer


@pytest.mark.parametrize(
    ("annotations", "limit", "needle"),
    [
        ({"gpu-fraction": "1.5"}, None, "strictly between 0 and 1"),
        ({"gpu-fraction": "0"}, None, "strictly between 0 and 1"),
        ({"gpu-fraction": "abc"}, None, "is not a number"),
        ({"gpu-fraction": "NaN"}, None, "finite"),
        ({"gpu-fraction": "0.5", "gpu-memory": "1024"}, None, "not both"),
        ({"gpu-fraction": "0.5"}, "1", "cannot be combined"),
        ({"gpu-fraction-num-devices": "2"}, None, "only applies together"),
    ],
)
def test_invalid_gpu_requests_are_refused_with_the_reason(
    annotations: dict[str, str], limit: str | None, needle: str
) -> None:
    body = review()
    body["request"]["object"]["metadata"]["annotations"] = annotations
    if limit:
        body["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = limit
    answer = admit(body, CONFIG)["response"]
    assert not answer["allowed"] and answer["status"]["code"] == 403
    assert (
        answer["status"]["message"].startswith("invalid GPU request: ")
        and needle in answer["status"]["message"]
    )


def test_queue_must_exist_and_be_a_leaf() -> None:
    for labels, needle in (
        ({"tessera.dev/queue": "nope"}, 'queue "nope"'),
        ({"kai.scheduler/queue": "org"}, "parent queue"),
    ):
        body = review()
        body["request"]["object"]["metadata"]["labels"] = labels
        answer = admit(body, CONFIG)["response"]
        assert not answer["allowed"] and needle in answer["status"]["message"]
    body = review()
    body["request"]["object"]["metadata"]["labels"] = {}
    assert admit(body, CONFIG)["response"]["allowed"]  # the default queue exists
    assert not admit(body, AdmissionConfig(queue_lookup=lambda _n: None))["response"]["allowed"]


def test_only_the_scheduler_may_write_the_assignment() -> None:
    assignment = '{"node":"n1","gpus":[{"index":0,"milli":1000}]}'
    body = review()
    body["request"]["object"]["metadata"]["annotations"]["tessera.dev/gpu-assignment"] = assignment
    answer = admit(body, CONFIG)["response"]
    assert not answer["allowed"] and "only the Tessera scheduler" in answer["status"]["message"]
    assert "alice@example.com" in answer["status"]["message"]
    update = review(operation="UPDATE", userInfo={"username": SCHEDULER_SA})
    update["request"]["oldObject"] = copy.deepcopy(REVIEW["request"]["object"])
    update["request"]["object"]["metadata"]["annotations"]["tessera.dev/gpu-assignment"] = assignment
    assert admit(update, CONFIG)["response"]["allowed"]
    # someone else removing or changing it is refused; an unrelated update is fine
    tamper = copy.deepcopy(update)
    tamper["request"]["userInfo"] = {"username": "bob"}
    tamper["request"]["oldObject"] = copy.deepcopy(update["request"]["object"])
    tamper["request"]["object"]["metadata"]["annotations"].pop("tessera.dev/gpu-assignment")
    assert not admit(tamper, CONFIG)["response"]["allowed"]
    benign = copy.deepcopy(tamper)
    benign["request"]["object"] = copy.deepcopy(benign["request"]["oldObject"])
    benign["request"]["object"]["metadata"]["labels"]["extra"] = "1"
    assert admit(benign, CONFIG)["response"]["allowed"]


def test_gpu_request_is_frozen_after_creation() -> None:
    body = review(operation="UPDATE")
    body["request"]["oldObject"] = copy.deepcopy(body["request"]["object"])
    body["request"]["object"]["metadata"]["annotations"]["gpu-fraction"] = "0.9"
    answer = admit(body, CONFIG)["response"]
    assert (
        not answer["allowed"]
        and "cannot change after the pod was created: gpu-fraction" in answer["status"]["message"]
    )


def test_other_schedulers_and_other_resources_are_left_alone() -> None:
    body = review()
    body["request"]["object"]["spec"]["schedulerName"] = "default-scheduler"
    body["request"]["object"]["metadata"]["annotations"] = {"gpu-fraction": "7"}
    answer = admit(body, CONFIG)["response"]
    assert answer["allowed"] and "patch" not in answer
    binding = review(subResource="binding")
    assert admit(binding, CONFIG)["response"]["allowed"]


def test_malformed_reviews_are_refused_not_raised() -> None:
    for bad in (
        {},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u"}},
        "text",
        None,
    ):
        answer = admit(bad, CONFIG)["response"]
        assert not answer["allowed"] and answer["status"]["code"] == 400
        assert answer["status"]["message"].startswith("malformed AdmissionReview")


@pytest.fixture
def tls_cert(tmp_path: Path) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


def test_https_server(tls_cert: tuple[str, str]) -> None:
    cert, key = tls_cert
    server = WebhookServer(CONFIG, certfile=cert, keyfile=key, host="127.0.0.1", port=0).start()
    context = ssl.create_default_context(cafile=cert)
    base = f"https://127.0.0.1:{server.port}"

    def post(path: str, data: bytes) -> tuple[int, bytes]:
        req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=context, timeout=5) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    try:
        status, raw = post("/mutate", json.dumps(REVIEW).encode())
        assert status == 200 and "patch" in json.loads(raw)["response"]
        status, raw = post("/validate", json.dumps(REVIEW).encode())
        assert status == 200 and json.loads(raw)["response"] == {
            "uid": REVIEW["request"]["uid"],
            "allowed": True,
        }
        status, raw = post("/mutate", b"{not json")  # still an AdmissionReview answer: refused, code 400
        assert status == 200 and json.loads(raw)["response"]["status"]["code"] == 400
        assert post("/elsewhere", b"{}")[0] == 404
        with urllib.request.urlopen(base + "/healthz", context=context, timeout=5) as resp:
            assert resp.read() == b"ok"
    finally:
        server.stop()


def test_a_wrongly_shaped_pod_is_refused_not_raised() -> None:
    body = review()
    body["request"]["object"]["spec"] = ["not", "a", "map"]
    answer = admit(body, CONFIG)["response"]
    assert not answer["allowed"] and answer["status"]["code"] == 400
    assert answer["status"]["message"].startswith("malformed pod: ")
