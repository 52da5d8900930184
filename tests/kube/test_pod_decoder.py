"""The pod watch decodes only what it keeps (`kube/pod_decoder.py`): after `slim_pod`, a pod decoded against
the schema is exactly the pod decoded whole, on every field the generators write and what the API server,
the controllers and the kubelet add; the schema names every field the Kubernetes client knows of ObjectMeta,
PodSpec and PodStatus but those `slim_pod` drops; what the schema does not expect is decoded whole."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client

from scheduler.kube import informer, pod_decoder
from scheduler.kube.informer import slim_pod
from scheduler.kube.pod_decoder import decode_pod_event, decode_pod_list
from tests.kube.test_slim_pod import as_served
from tests.kube_rules.clusters import pod_object


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(pod_object("p", rich=True), st.sampled_from([None, "n1"]))
def test_a_pod_decoded_against_the_schema_is_kept_as_one_decoded_whole(pod: dict, node: str | None) -> None:
    served = as_served(pod, node)
    page = json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": [served]})
    fast, whole = decode_pod_list(page), json.loads(page)
    assert fast["metadata"] == whole["metadata"]
    assert slim_pod(fast["items"][0]) == slim_pod(whole["items"][0])
    line = json.dumps({"type": "MODIFIED", "object": served})
    event = decode_pod_event(line)
    assert event["type"] == "MODIFIED" and slim_pod(event["object"]) == slim_pod(json.loads(line)["object"])
    assert "managedFields" not in fast["items"][0]["metadata"]  # never built
    assert all(
        set(c) <= {"name", "resources", "ports", "restartPolicy"}
        for c in fast["items"][0]["spec"]["containers"]
    )


def test_the_schema_keeps_every_field_the_client_knows_but_those_slim_pod_drops() -> None:
    known = {
        pod_decoder._Meta: (client.V1ObjectMeta, {"managedFields"}),
        pod_decoder._Spec: (client.V1PodSpec, {"ephemeralContainers"}),
        pod_decoder._Status: (
            client.V1PodStatus,
            set(informer._UNREAD_POD_STATUS),
        ),
    }
    for schema, (model, dropped) in known.items():
        fields = set(model.attribute_map.values())
        assert fields - dropped <= set(schema.__annotations__), (
            model.__name__,
            fields - dropped - set(schema.__annotations__),
        )


def test_what_the_schema_does_not_expect_is_decoded_whole() -> None:
    error = '{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}'
    assert decode_pod_event(error)["object"]["code"] == 410
    bookmark = '{"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "42"}}}'
    assert decode_pod_event(bookmark)["object"]["metadata"]["resourceVersion"] == "42"
    odd = {"metadata": {"name": "p"}, "spec": {"containers": "not a list", "command": ["x"]}}
    page = json.dumps({"items": [odd]})
    assert decode_pod_list(page) == json.loads(page)  # kept as it came, for the parser to refuse
    assert decode_pod_event(json.dumps({"type": "ADDED", "object": odd}))["object"] == odd
