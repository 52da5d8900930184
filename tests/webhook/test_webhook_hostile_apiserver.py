"""The webhook as the real kube-apiserver calls it: the chart's webhook configurations (their CEL match
conditions compiled by the API server itself) pointed at the real HTTPS server, pods written with the real
kubectl and client. CREATE and UPDATE both reach it; what issue 14 found admitted is refused.
(tests/webhook/test_webhook_apiserver.py has the everyday cases on the same set-up.)"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from kubernetes import client

from scheduler.api.keys import GPU_ALLOCATED, GPU_ASSIGNMENT
from scheduler.sandbox.controlplane import ControlPlane
from scheduler.webhook.admission import AdmissionConfig
from scheduler.webhook.server import WebhookServer
from tests.deploy.deploy_support import needs_helm, render_chart

pytestmark = pytest.mark.apiserver


@dataclass
class Cluster:
    cp: ControlPlane
    namespace: str
    admin: client.CoreV1Api
    plugin: client.CoreV1Api  # as the device plugin's service account
    scheduler: client.CoreV1Api  # as the scheduler's service account

    def kubectl_apply(self, obj: dict[str, Any]) -> tuple[int, str]:
        done = self.cp.kubectl(
            "apply", "-n", self.namespace, "-f", "-", input=yaml.safe_dump(obj), check=False
        )
        return done.returncode, done.stderr.strip()


def _pod(name: str, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "cuda"}
    if "limits" in spec:
        container["resources"] = {"limits": spec.pop("limits")}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"tessera.dev/queue": "team-a"},
            "annotations": annotations or {},
        },
        "spec": {"schedulerName": "tessera", "containers": [container], **spec},
    }


def _grant(admin: client.ApiClient, namespace: str, account: str, verbs: list[str]) -> None:
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": account},
                                            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}]})  # fmt: skip
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": account},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    })  # fmt: skip


@pytest.fixture
def cluster(control_plane: ControlPlane, namespace: str) -> Iterator[Cluster]:
    needs_helm()
    release = f"wh{uuid.uuid4().hex[:6]}"
    scheduler_sa, plugin_sa = f"{release}-tessera-scheduler", f"{release}-tessera-device-plugin"
    admin = control_plane.client()
    core = client.CoreV1Api(admin)
    for account in (scheduler_sa, plugin_sa):
        core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
        _grant(admin, namespace, account, ["get", "patch"])
    certs = control_plane.ca.issue(
        f"webhook-{release}", common_name="127.0.0.1", hosts=("127.0.0.1",), server=True
    )
    config = AdmissionConfig(
        privileged_users=frozenset({f"system:serviceaccount:{namespace}:{scheduler_sa}"}),
        allocation_writers=frozenset({f"system:serviceaccount:{namespace}:{plugin_sa}"}),
        queue_lookup={"team-a": "leaf", "default": "leaf"}.get,  # type: ignore[arg-type]
    )
    server = WebhookServer(config, certfile=str(certs.cert), keyfile=str(certs.key), host="127.0.0.1", port=0)
    server.start()
    # The chart's webhook configurations, released into the test namespace, calling our server; scoped to
    # this test's namespace so that nothing else on the shared control plane depends on it.
    configs = [o for o in render_chart.render({}, release=release, namespace=namespace)
               if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")]  # fmt: skip
    for cfg in configs:
        for hook in cfg["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{server.port}{path}",
                                    "caBundle": base64.b64encode(control_plane.ca.pem).decode()}  # fmt: skip
            hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(configs))
    try:
        yield Cluster(
            control_plane,
            namespace,
            core,
            client.CoreV1Api(control_plane.client(control_plane.kubeconfig_for_service_account(namespace, plugin_sa))),
            client.CoreV1Api(control_plane.client(control_plane.kubeconfig_for_service_account(namespace, scheduler_sa))),
        )  # fmt: skip
    finally:
        for cfg in configs:
            control_plane.kubectl(
                "delete", cfg["kind"], cfg["metadata"]["name"], "--ignore-not-found", check=False
            )
        server.stop()


def test_hostile_numbers_are_refused_at_the_api_server(cluster: Cluster) -> None:
    for notes, limits, needle in (
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "9" * 4000}, None, "is not a whole number"),
        ({"gpu-fraction": "٠.٥"}, None, "is not a number"),
        ({}, {"nvidia.com/gpu": "9" * 18}, "largest value accepted (64)"),
    ):
        rc, err = cluster.kubectl_apply(_pod("bad", notes, **({"limits": limits} if limits else {})))
        assert rc != 0 and "denied the request" in err and needle in err, err


def test_a_fractional_pod_is_admitted_with_its_slice_limit(cluster: Cluster) -> None:
    rc, err = cluster.kubectl_apply(_pod("half", {"gpu-fraction": "0.5"}))
    assert rc == 0, err
    pod = cluster.admin.read_namespaced_pod("half", cluster.namespace)
    assert pod.spec.containers[0].resources.limits == {"tessera.dev/gpu-slice": "1"}


def test_updates_reach_the_webhook(cluster: Cluster) -> None:
    ns = cluster.namespace
    assert cluster.kubectl_apply(_pod("p", {"gpu-fraction": "0.5"}))[0] == 0
    with pytest.raises(client.ApiException) as err:  # the GPU request is frozen
        cluster.admin.patch_namespaced_pod("p", ns, {"metadata": {"annotations": {"gpu-fraction": "0.9"}}})
    assert err.value.status == 403 and "cannot change after the pod was created" in str(err.value.body)
    cluster.admin.create_namespaced_pod_binding("p", ns, client.V1Binding(
        metadata=client.V1ObjectMeta(name="p"), target=client.V1ObjectReference(kind="Node", name="n1")),
        _preload_content=False)  # fmt: skip
    with pytest.raises(client.ApiException) as err:  # bound: its queue is frozen
        cluster.admin.patch_namespaced_pod(
            "p", ns, {"metadata": {"labels": {"tessera.dev/queue": "default"}}}
        )
    assert err.value.status == 403 and "the queue of a bound pod cannot change" in str(err.value.body)
    cluster.admin.patch_namespaced_pod(
        "p", ns, {"metadata": {"labels": {"team": "x"}}}
    )  # anything else is fine


def test_pods_that_would_take_gpus_the_scheduler_did_not_give_are_refused(cluster: Cluster) -> None:
    other = _pod("other", limits={"tessera.dev/gpu-slice": "1"}, schedulerName="default-scheduler")
    rc, err = cluster.kubectl_apply(other)
    assert rc != 0 and "served only to pods placed by the Tessera scheduler" in err
    rc, err = cluster.kubectl_apply(_pod("preset", {"gpu-fraction": "0.5"}, nodeName="n1"))
    assert rc != 0 and "remove spec.nodeName" in err


def test_only_the_device_plugin_marks_allocated_and_only_the_scheduler_assigns(cluster: Cluster) -> None:
    ns = cluster.namespace
    rc, err = cluster.kubectl_apply(
        _pod("preset", {"gpu-fraction": "0.5", GPU_ALLOCATED: "2020-01-01T00:00:00Z"})
    )
    assert rc != 0 and "only Tessera's device plugin may set annotation tessera.dev/gpu-allocated" in err
    assert cluster.kubectl_apply(_pod("p", {"gpu-fraction": "0.5"}))[0] == 0
    mark = {"metadata": {"annotations": {GPU_ALLOCATED: "now"}}}
    with pytest.raises(client.ApiException) as refused:
        cluster.admin.patch_namespaced_pod("p", ns, mark)
    assert refused.value.status == 403
    cluster.plugin.patch_namespaced_pod("p", ns, mark)
    assignment = {"metadata": {"annotations": {GPU_ASSIGNMENT: json.dumps({"node": "n1", "gpus": []})}}}
    with pytest.raises(client.ApiException) as refused:
        cluster.plugin.patch_namespaced_pod("p", ns, assignment)
    assert "only the Tessera scheduler" in str(refused.value.body)
    cluster.scheduler.patch_namespaced_pod("p", ns, assignment)
