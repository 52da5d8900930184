"""The control plane the Kubernetes tests run on is the real thing: RBAC, the Node authorizer,
controllers, versions."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from scheduler.sandbox import assets
from scheduler.sandbox.controlplane import ControlPlane

pytestmark = pytest.mark.apiserver


def test_versions_are_the_pinned_release(control_plane: ControlPlane) -> None:
    out = control_plane.kubectl("version", "-o", "yaml").stdout
    assert f"gitVersion: {assets.KUBERNETES_VERSION}" in out  # client
    assert out.count(f"gitVersion: {assets.KUBERNETES_VERSION}") == 2  # and server


def test_service_accounts_get_only_what_rbac_grants(control_plane: ControlPlane, namespace: str) -> None:
    core = client.CoreV1Api(control_plane.client())
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="sa"))
    )
    kubeconfig = control_plane.kubeconfig_for_service_account(namespace, "sa")
    as_sa = client.CoreV1Api(control_plane.client(kubeconfig))
    with pytest.raises(client.ApiException) as refused:
        as_sa.list_namespaced_pod(namespace)
    assert refused.value.status == 403
    rbac = client.RbacAuthorizationV1Api(control_plane.client())
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "read-pods"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
    })  # fmt: skip
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "read-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-pods"},
        "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": namespace}],
    })  # fmt: skip
    deadline = time.monotonic() + 10
    while True:  # RBAC is read from a watch cache: allow it a moment
        try:
            assert as_sa.list_namespaced_pod(namespace).items == []
            break
        except client.ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_node_authorizer_limits_a_kubelet_to_its_own_node(control_plane: ControlPlane) -> None:
    kubeconfig = control_plane.kubeconfig_for_user("system:node:cp-n1", ("system:nodes",))
    as_node = client.CoreV1Api(control_plane.client(kubeconfig))
    as_node.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="cp-n1")))
    try:
        assert as_node.read_node("cp-n1").metadata.name == "cp-n1"
        with pytest.raises(client.ApiException) as refused:
            as_node.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="cp-n2")))
        assert refused.value.status == 403
    finally:
        client.CoreV1Api(control_plane.client()).delete_node("cp-n1")


def test_controllers_run_a_job_creates_its_pods(control_plane: ControlPlane, namespace: str) -> None:
    batch = client.BatchV1Api(control_plane.client())
    batch.create_namespaced_job(namespace, {
        "metadata": {"name": "two"},
        "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
    })  # fmt: skip
    core = client.CoreV1Api(control_plane.client())
    deadline = time.monotonic() + 30
    while len(core.list_namespaced_pod(namespace, label_selector="job-name=two").items) < 2:
        assert time.monotonic() < deadline, "the job controller made no pods"
        time.sleep(0.2)
    owners = {p.metadata.owner_references[0].kind for p in core.list_namespaced_pod(namespace).items}
    assert owners == {"Job"}
