"""The pod watch's cache keeps of a pod only what the scheduler reads (`informer.slim_pod`): whatever a pod
carries, the scheduler's reading of the slimmed pod is the reading of the pod as served (the property over
every field the kube-rules generator writes, with what a kubelet and the controllers add besides)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.kube.informer import slim_pod
from scheduler.model.parse import InvalidObject, parse_pod
from tests.kube_rules.clusters import SERVICE_ACCOUNT_VOLUME, pod_object

Obj = dict[str, Any]


def as_served(pod: Obj, node: str | None) -> Obj:
    """`pod` with what the API server, its controller and its kubelet add that the scheduler never reads."""
    out = copy.deepcopy(pod)
    spec = out["spec"]
    for kind in ("containers", "initContainers"):
        for c in spec.get(kind) or []:
            c.update(image="registry.example.com/train:1.2", imagePullPolicy="IfNotPresent",
                     command=["python", "train.py"], args=["--epochs", "3"],
                     env=[{"name": "RANK", "value": "0"}, {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                     volumeMounts=[{"name": SERVICE_ACCOUNT_VOLUME["name"], "mountPath": "/var/run/secrets", "readOnly": True}],
                     livenessProbe={"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
                     securityContext={"runAsNonRoot": True}, terminationMessagePath="/dev/termination-log")  # fmt: skip
    spec.setdefault("volumes", []).insert(0, SERVICE_ACCOUNT_VOLUME)
    spec["ephemeralContainers"] = [{"name": "debugger", "image": "busybox"}]
    out["metadata"]["managedFields"] = [
        {"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}
    ]
    if node:
        spec["nodeName"] = node
        out["status"] = {
            "phase": "Running", "startTime": "2026-12-04T10:00:05Z",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": c["name"], "ready": True, "restartCount": 0, "image": "x",
                                   "state": {"running": {"startedAt": "2026-12-04T10:00:06Z"}}}
                                  for c in spec["containers"]],
        }  # fmt: skip
    return out


def reading(pod: Obj) -> Any:
    try:
        return parse_pod(pod)
    except InvalidObject as exc:
        return str(exc)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(pod_object("p", rich=True), st.sampled_from([None, "n1"]))
def test_a_slimmed_pod_reads_as_the_pod_served(pod: Obj, node: str | None) -> None:
    served = as_served(pod, node)
    assert reading(slim_pod(copy.deepcopy(served))) == reading(served)


def test_what_is_left_out_and_what_is_kept() -> None:
    served = as_served({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [
        {"name": "main", "resources": {"requests": {"cpu": "1"}}, "ports": [{"containerPort": 80, "hostPort": 80}]}],
        "initContainers": [{"name": "side", "restartPolicy": "Always", "resources": {}}]}}, "n1")  # fmt: skip
    slimmed = slim_pod(served)
    assert slimmed["spec"]["containers"] == [
        {
            "name": "main",
            "resources": {"requests": {"cpu": "1"}},
            "ports": [{"containerPort": 80, "hostPort": 80}],
        }
    ]
    assert slimmed["spec"]["initContainers"] == [{"name": "side", "restartPolicy": "Always", "resources": {}}]
    assert "ephemeralContainers" not in slimmed["spec"] and "managedFields" not in slimmed["metadata"]
    assert "containerStatuses" not in slimmed["status"]
    assert slimmed["status"]["conditions"][0]["type"] == "PodScheduled"  # the status writer reads these
    assert slimmed["spec"]["volumes"] == []  # only claims are read from volumes
    claim = {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}}
    scratch = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
    served["spec"]["volumes"] = [
        SERVICE_ACCOUNT_VOLUME,
        claim,
        {"name": "tmp", "emptyDir": {}},
        scratch,
        "bad",
    ]
    assert slim_pod(served)["spec"]["volumes"] == [claim, scratch, "bad"]
    broken = {"metadata": {"name": "b"}, "spec": {"containers": "not a list"}, "status": []}
    assert slim_pod(copy.deepcopy(broken)) == broken  # left for the parser to refuse, as it came
