"""The chart's node policy on the real kube-apiserver: a device plugin or agent token issued for a pod on
node A may write node A's GPUNodeReport and pods, and nothing of node B; no Node at all (the device plugin
releases no lock any more: its role has no node access).

The chart's service accounts, node roles and ValidatingAdmissionPolicy are applied with the real kubectl;
the tokens come from the TokenRequest API bound to a pod on each node, as the kubelet gets them (so the
API server, not the test, puts the node claim in them)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from kubernetes import client

from scheduler.sandbox.controlplane import ControlPlane
from tests.deploy.deploy_support import Manifest, needs_helm, render_chart

pytestmark = pytest.mark.apiserver

GROUP, VERSION = "scheduling.tessera.dev", "v1alpha1"
PROBE = "tessera.dev/probe"
NODE_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
              "ValidatingAdmissionPolicyBinding"}  # fmt: skip


@dataclass
class NodeWorld:
    namespace: str
    nodes: tuple[str, str]  # (A, B)
    admin: client.ApiClient
    plugin_a: client.ApiClient  # the device plugin's token for its pod on A
    agent_a: client.ApiClient  # the agent's token for its pod on A
    plugin_unbound: client.ApiClient  # the device plugin's account, token bound to nothing


def _apply(cp: ControlPlane, docs: list[Manifest]) -> None:
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))


def _token_client(
    cp: ControlPlane, namespace: str, account: str, pod: client.V1Pod | None
) -> client.ApiClient:
    bound = None
    if pod is not None:
        bound = client.V1BoundObjectReference(kind="Pod", api_version="v1", name=pod.metadata.name,
                                              uid=pod.metadata.uid)  # fmt: skip
    return cp.client(cp.kubeconfig_for_service_account(namespace, account, bound_object=bound))


@pytest.fixture
def world(control_plane: ControlPlane, namespace: str) -> Iterator[NodeWorld]:
    needs_helm()
    release = f"np{uuid.uuid4().hex[:6]}"
    objects = render_chart.render({}, release=release, namespace=namespace)
    _apply(control_plane, list(render_chart.crds()))
    control_plane.kubectl("wait", "--for", "condition=established", "--timeout=60s",
                          f"crd/gpunodereports.{GROUP}")  # fmt: skip
    node_objects = [
        o for o in objects if o["kind"] in NODE_KINDS and "scheduler" not in o["metadata"]["name"]
    ]
    _apply(control_plane, node_objects)
    admin = control_plane.client()
    core = client.CoreV1Api(admin)
    nodes = (f"{release}-a", f"{release}-b")
    for name in nodes:
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name)))
    pods: dict[tuple[str, str], client.V1Pod] = {}
    for account in ("agent", "device-plugin"):
        for node in nodes:
            pods[(account, node)] = core.create_namespaced_pod(namespace, client.V1Pod(
                metadata=client.V1ObjectMeta(name=f"{account}-{node}"),
                spec=client.V1PodSpec(service_account_name=f"{release}-tessera-{account}", node_name=node,
                                      containers=[client.V1Container(name="c", image="tessera")]),
            ))  # fmt: skip
    plugin_sa, agent_sa = f"{release}-tessera-device-plugin", f"{release}-tessera-agent"
    world = NodeWorld(
        namespace=namespace,
        nodes=nodes,
        admin=admin,
        plugin_a=_token_client(control_plane, namespace, plugin_sa, pods[("device-plugin", nodes[0])]),
        agent_a=_token_client(control_plane, namespace, agent_sa, pods[("agent", nodes[0])]),
        plugin_unbound=_token_client(control_plane, namespace, plugin_sa, None),
    )
    _wait_for_the_policy(world)
    try:
        yield world
    finally:
        for name in nodes:
            core.delete_node(name)
        for o in objects:
            if o["kind"] in ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                             "ValidatingAdmissionPolicyBinding"):  # fmt: skip
                control_plane.kubectl(
                    "delete", o["kind"], o["metadata"]["name"], "--ignore-not-found", check=False
                )
        custom = client.CustomObjectsApi(admin)
        for name in nodes:
            with contextlib.suppress(client.ApiException):
                custom.delete_cluster_custom_object(GROUP, VERSION, "gpunodereports", name)


def _wait_for_the_policy(world: NodeWorld, timeout_s: float = 30) -> None:
    """RBAC and the policy reach the API server's caches a moment after they are created: probe with a
    harmless write (an annotation of no meaning) until the policy refuses it, so that no refusal a test
    expects can slip through as an early success."""
    probe = client.CoreV1Api(world.plugin_a)
    deadline = time.monotonic() + timeout_s
    for attempt in range(10**6):
        try:
            probe.patch_namespaced_pod(
                f"agent-{world.nodes[1]}", world.namespace,
                {"metadata": {"annotations": {PROBE: str(attempt)}}},
            )  # fmt: skip
        except client.ApiException as exc:
            if exc.status == 403 and "may change only pods bound to it" in str(exc.body):
                return
        assert time.monotonic() < deadline, "the node policy never took effect"
        time.sleep(0.2)


def refused(call: Callable[[], Any]) -> str:
    """`call` must be refused (403); its message."""
    with pytest.raises(client.ApiException) as err:
        call()
    assert err.value.status == 403, err.value
    return str(err.value.body)


def allowed(call: Callable[[], Any], timeout_s: float = 20) -> Any:
    """`call` must succeed (retried while RBAC, which the policy probe does not cover, catches up)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except client.ApiException as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _patch_node(api: client.ApiClient, node: str, value: str | None) -> Callable[[], Any]:
    return lambda: client.CoreV1Api(api).patch_node(node, {"metadata": {"annotations": {PROBE: value}}})


def _report(node: str, spec_node: str | None = None) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUNodeReport", "metadata": {"name": node},
            "spec": {"node": spec_node or node, "observedAt": "2026-01-01T00:00:00Z", "gpus": []}}  # fmt: skip


def test_a_device_plugin_token_writes_no_node(world: NodeWorld) -> None:
    a, b = world.nodes
    for node in (a, b):
        _patch_node(world.admin, node, "x")()
        message = refused(_patch_node(world.plugin_a, node, None))
        assert 'cannot patch resource \\"nodes\\"' in message or "forbidden" in message, message
        assert PROBE in (client.CoreV1Api(world.admin).read_node(node).metadata.annotations or {})


def test_an_agent_token_of_node_a_cannot_write_node_bs_report(world: NodeWorld) -> None:
    a, b = world.nodes
    as_agent = client.CustomObjectsApi(world.agent_a)
    reports = "gpunodereports"
    allowed(lambda: as_agent.create_cluster_custom_object(GROUP, VERSION, reports, _report(a)))
    message = refused(lambda: as_agent.create_cluster_custom_object(GROUP, VERSION, reports, _report(b)))
    assert f"may write only GPUNodeReport {a}" in message
    client.CustomObjectsApi(world.admin).create_cluster_custom_object(GROUP, VERSION, reports, _report(b))
    refused(
        lambda: as_agent.patch_cluster_custom_object(
            GROUP, VERSION, reports, b, {"spec": {"cudaVersion": "x"}}
        )
    )
    # Its own report may not claim to describe another node either.
    refused(lambda: as_agent.patch_cluster_custom_object(GROUP, VERSION, reports, a, {"spec": {"node": b}}))
    allowed(
        lambda: as_agent.patch_cluster_custom_object(
            GROUP, VERSION, reports, a, {"spec": {"cudaVersion": "x"}}
        )
    )


def test_a_device_plugin_token_of_node_a_cannot_mark_node_bs_pods(world: NodeWorld) -> None:
    a, b = world.nodes
    core = client.CoreV1Api(world.plugin_a)
    mark = {"metadata": {"annotations": {"tessera.dev/gpu-allocated": "now"}}}
    message = refused(lambda: core.patch_namespaced_pod(f"agent-{b}", world.namespace, mark))
    assert "may change only pods bound to it" in message
    allowed(lambda: core.patch_namespaced_pod(f"agent-{a}", world.namespace, mark))


def test_a_token_that_names_no_node_is_refused(world: NodeWorld) -> None:
    a, _ = world.nodes
    mark = {"metadata": {"annotations": {"tessera.dev/gpu-allocated": "now"}}}
    message = refused(
        lambda: client.CoreV1Api(world.plugin_unbound).patch_namespaced_pod(
            f"agent-{a}", world.namespace, mark
        )
    )
    assert "name no node" in message
