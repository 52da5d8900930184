"""The pod watch's cache keeps of a pod only what the scheduler reads (`informer.slim_pod`): whatever a pod
carries, the scheduler's reading of the slimmed pod is the reading of the pod as served (the property over
every field the kube-rules generator writes, with what a kubelet and the controllers add besides)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.kube.informer import PodSlimmer, slim_pod
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
    assert "volumes" not in slimmed["spec"]  # only claims are read from volumes: none, no list
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


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    st.lists(
        st.tuples(pod_object("p", rich=True), st.sampled_from([None, "n1", "n2"])), min_size=2, max_size=5
    )
)
def test_pods_slimmed_by_one_watch_read_as_served_whatever_they_share(
    pods: list[tuple[Obj, str | None]],
) -> None:
    watch = PodSlimmer()  # one cache: what the pods have alike is the same object in each
    served = [as_served(pod, node) for pod, node in pods]
    # Each twice, as a relist after the first list delivers them again: the second reading finds shared parts.
    kept = [watch(copy.deepcopy(s)) for s in served + served]
    assert [reading(k) for k in kept] == [reading(s) for s in served + served]


def template_pod(name: str, node: str) -> Obj:
    """A pod of a ReplicaSet's template: its own name, node, address and condition times."""
    owner = {"kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": f"2026-12-04T10:00:0{len(name) % 10}Z"}
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": "train"}, "ownerReferences": [owner]},
        "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {"requests": {"cpu": "2"}}}],
                 "tolerations": [{"key": "gpu", "operator": "Exists"}]},
        "status": {"phase": "Running", "podIP": f"10.0.0.{len(name)}", "conditions": [ready]},
    }  # fmt: skip


def test_the_pods_of_one_template_share_what_they_have_alike() -> None:
    watch = PodSlimmer()
    a, b = watch(template_pod("a", "n1")), watch(template_pod("bb", "n2"))
    for path in (("spec", "containers"), ("spec", "tolerations"), ("metadata", "labels"),
                 ("metadata", "ownerReferences"), ("status", "conditions")):  # fmt: skip
        assert a[path[0]][path[1]] is b[path[0]][path[1]], path
    assert a["spec"] is not b["spec"] and (a["spec"]["nodeName"], b["spec"]["nodeName"]) == ("n1", "n2")
    assert a["metadata"] is not b["metadata"] and a["metadata"]["name"] == "a"
    assert a["status"]["conditions"] == [{"type": "Ready", "status": "True"}]  # its time is left out
    assert "podIP" not in a["status"]
    # The parser reads the shared parts once: the pods' label maps are one read-only map.
    pa, pb = parse_pod(a), parse_pod(b)
    assert (
        pa.labels is pb.labels and pa.tolerations is pb.tolerations and pa.cpu_milli == pb.cpu_milli == 2000
    )
    with pytest.raises(TypeError):
        pa.labels["app"] = "other"
