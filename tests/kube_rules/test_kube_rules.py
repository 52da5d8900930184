"""The three repros of issue 29 and the volume hand-off, on the real kube-apiserver with the real scheduling
loop under the chart's RBAC (namespaces, PersistentVolumes, claims and StorageClasses watched): pods bound
never exceed a node's `pods`, a pod asking more ephemeral-storage than any node has stays pending with
kube-scheduler's reason, a required anti-affinity Deployment puts one replica per node and the rest wait,
and a claim waiting for its first consumer is marked for the node chosen (or its volume pre-bound)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.controlplane.scene import Scene, wait_until
from tests.kube.helpers import pod_body

pytestmark = pytest.mark.apiserver


def _node(scene: Scene, name: str, **allocatable: str) -> None:
    scene.node(name, cpu="8", memory="32Gi", labels={"topology.kubernetes.io/zone": "a"})
    if allocatable:
        status = scene.node_obj(name)["status"]
        for field in ("capacity", "allocatable"):
            status[field].update(allocatable)
        scene.core.patch_node_status(name, {"status": {"capacity": status["capacity"],
                                                       "allocatable": status["allocatable"]}})  # fmt: skip


def _pod(name: str, requests: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    body = pod_body(name, labels={"app": "web"})
    if requests:
        body["spec"]["containers"][0]["resources"] = {"requests": requests}
    body["spec"].update(spec)
    return body


def _condition(scene: Scene, name: str) -> str:
    conds = scene.pod(name)["status"].get("conditions") or []
    return str(next((c.get("message", "") for c in conds if c["type"] == "PodScheduled"), ""))


def test_pods_bound_never_exceed_a_nodes_pod_slots(scene: Scene) -> None:
    for i in range(2):
        _node(scene, f"n{i}", pods="6")
    scene.scheduler()
    for i in range(14):
        scene.create_pod(_pod(f"web-{i}", {"cpu": "10m"}))
    wait_until(lambda: len(scene.bound()) == 12, timeout=30)
    per_node: dict[str, int] = {}
    for p in scene.bound().values():
        per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
    assert per_node == {"n0": 6, "n1": 6}
    waiting = [p["metadata"]["name"] for p in scene.pods() if not p["spec"].get("nodeName")]
    wait_until(lambda: "2 Too many pods" in _condition(scene, waiting[0]), timeout=15)


def test_more_ephemeral_storage_than_any_node_has_stays_pending_with_the_reason(scene: Scene) -> None:
    for i in range(2):
        _node(scene, f"n{i}", **{"ephemeral-storage": "500Gi"})
    scene.scheduler()
    scene.create_pod(_pod("vllm", {"cpu": "1", "ephemeral-storage": "800Gi"}))
    scene.create_pod(_pod("small", {"cpu": "1", "ephemeral-storage": "100Gi"}))
    wait_until(lambda: "small" in scene.bound(), timeout=20)
    wait_until(lambda: "2 Insufficient ephemeral-storage" in _condition(scene, "vllm"), timeout=15)
    assert "vllm" not in scene.bound()


def test_a_required_anti_affinity_deployment_puts_one_replica_per_node(scene: Scene) -> None:
    for i in range(3):
        _node(scene, f"n{i}")
    scene.scheduler()
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}  # fmt: skip
    for i in range(4):
        scene.create_pod(_pod(f"web-{i}", {"cpu": "100m"}, affinity=anti))
    wait_until(lambda: len(scene.bound()) == 3, timeout=20)
    assert sorted(p["spec"]["nodeName"] for p in scene.bound().values()) == ["n0", "n1", "n2"]
    waiting = next(p["metadata"]["name"] for p in scene.pods() if not p["spec"].get("nodeName"))
    wait_until(
        lambda: "3 node(s) didn't match pod anti-affinity rules" in _condition(scene, waiting), timeout=15
    )


def test_a_claim_waiting_for_its_first_consumer_is_marked_for_the_node_chosen(scene: Scene) -> None:
    storage = client.StorageV1Api(scene.admin)
    for i in range(2):
        _node(scene, f"n{i}")
    name = f"wffc-{scene.ns}"
    storage.create_storage_class({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                  "metadata": {"name": name}, "provisioner": "csi.example.com",
                                  "volumeBindingMode": "WaitForFirstConsumer",
                                  "allowedTopologies": [{"matchLabelExpressions": [
                                      {"key": "kubernetes.io/hostname", "values": ["n1"]}]}]})  # fmt: skip
    scene.on_cleanup(lambda: storage.delete_storage_class(name))
    scene.core.create_namespaced_persistent_volume_claim(scene.ns, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": name,
                 "resources": {"requests": {"storage": "1Gi"}}}})  # fmt: skip
    scene.scheduler()
    scene.create_pod(_pod("db-0", {"cpu": "100m"},
                          volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]))  # fmt: skip
    wait_until(lambda: "db-0" in scene.bound(), timeout=20)
    assert scene.bound()["db-0"]["spec"]["nodeName"] == "n1"  # the class provisions there only
    claim = scene.core.read_namespaced_persistent_volume_claim("data", scene.ns)
    assert (claim.metadata.annotations or {}).get("volume.kubernetes.io/selected-node") == "n1"
