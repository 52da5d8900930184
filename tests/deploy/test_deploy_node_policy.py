"""Least privilege on GPU nodes: separate accounts for the agent and the device plugin, CAP_KILL only in
kill mode, and the ValidatingAdmissionPolicy that keeps each node's components to their own node.

The policy's CEL is evaluated here with cel-python on the requests the API server would send; the same
policy on a real kube-apiserver is tested in tests/deploy/test_deploy_node_policy_apiserver.py (when
the control-plane binaries are there)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.deploy.deploy_support import Manifest, find, one

celpy = pytest.importorskip("celpy", reason="evaluating CEL needs cel-python (pip install cel-python)")

AGENT = "system:serviceaccount:tessera-system:tessera-agent"
PLUGIN = "system:serviceaccount:tessera-system:tessera-device-plugin"
NODE_CLAIM = "authentication.kubernetes.io/node-name"


def _eval(expression: str, activation: dict[str, Any]) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expression)).evaluate(activation)


def admits(
    policy: Manifest, *, user: str, resource: str, operation: str, obj: Any, old: Any = None,
    node: str | None = "gpu-a", group: str = "",
) -> tuple[bool, list[str]]:  # fmt: skip
    """(the policy applies, the messages of the validations that fail) for one request."""
    extra = {NODE_CLAIM: [node]} if node else {}
    request = {
        "operation": operation,
        "resource": {"group": group, "version": "v1", "resource": resource},
        "userInfo": {"username": user, "extra": extra},
    }
    activation: dict[str, Any] = {
        "request": celpy.json_to_cel(request),
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
    }
    spec = policy["spec"]
    if not all(bool(_eval(c["expression"], activation)) for c in spec.get("matchConditions", [])):
        return False, []
    variables: dict[str, Any] = {}
    for var in spec.get("variables", []):  # in order: each may read the ones before it
        activation["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()}
        )
        variables[var["name"]] = _eval(var["expression"], activation)
    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()}
    )
    failed = []
    for rule in spec["validations"]:
        result = _eval(rule["expression"], activation)
        assert isinstance(result, celpy.celtypes.BoolType), f"{rule['expression']!r} gave {result!r}"
        if not result:
            msg = rule.get("message") or str(_eval(rule["messageExpression"], activation))
            failed.append(msg)
    return True, failed


def node(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations or {}}}


def report(name: str, spec_node: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "GPUNodeReport",
            "metadata": {"name": name}, "spec": {"node": spec_node or name, "observedAt": "t", "gpus": []}}  # fmt: skip


def pod(node_name: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": spec}


@pytest.fixture
def policy(default_objects: list[Manifest]) -> Manifest:
    return one(default_objects, "ValidatingAdmissionPolicy")


def test_a_node_component_may_change_only_its_own_node(policy: Manifest) -> None:
    """(Its role gives it no node access now; the policy still keeps it to its own, should a role ever.)"""
    marked = node("gpu-a", {"tessera.dev/probe": "x"})
    assert admits(
        policy, user=PLUGIN, resource="nodes", operation="UPDATE", obj=node("gpu-a"), old=marked
    ) == (True, [])
    applies, failed = admits(policy, user=PLUGIN, resource="nodes", operation="UPDATE", obj=node("gpu-b"),
                             old=node("gpu-b", {"tessera.dev/probe": "x"}))  # fmt: skip
    assert applies and failed == ["the node components of gpu-a may not change node gpu-b"]


def test_an_agent_may_write_only_its_own_report(policy: Manifest) -> None:
    group = "scheduling.tessera.dev"
    for operation, old in (("CREATE", None), ("UPDATE", report("gpu-a"))):
        assert admits(policy, user=AGENT, resource="gpunodereports", operation=operation, group=group,
                      obj=report("gpu-a"), old=old) == (True, [])  # fmt: skip
    for obj in (report("gpu-b"), report("gpu-a", spec_node="gpu-b")):
        _, failed = admits(policy, user=AGENT, resource="gpunodereports", operation="UPDATE", group=group,
                           obj=obj, old=obj)  # fmt: skip
        assert failed == ["the node components of gpu-a may write only GPUNodeReport gpu-a"]


def test_a_plugin_may_mark_only_pods_bound_to_its_node(policy: Manifest) -> None:
    assert admits(
        policy, user=PLUGIN, resource="pods", operation="UPDATE", obj=pod("gpu-a"), old=pod("gpu-a")
    ) == (True, [])
    for where in ("gpu-b", None):
        _, failed = admits(
            policy, user=PLUGIN, resource="pods", operation="UPDATE", obj=pod(where), old=pod(where)
        )
        assert failed == ["the node components of gpu-a may change only pods bound to it"]


def test_a_token_without_a_node_is_refused(policy: Manifest) -> None:
    applies, failed = admits(policy, user=PLUGIN, resource="nodes", operation="UPDATE", obj=node("gpu-a"),
                             old=node("gpu-a"), node=None)  # fmt: skip
    assert applies and failed and "name no node" in failed[0]


def test_everyone_else_is_left_to_rbac(policy: Manifest) -> None:
    for user in ("system:serviceaccount:tessera-system:tessera-scheduler", "system:node:gpu-b", "alice"):
        assert admits(policy, user=user, resource="nodes", operation="UPDATE", obj=node("gpu-b"),
                      old=node("gpu-b")) == (False, [])  # fmt: skip


def test_the_policy_is_bound_and_names_the_release_accounts(render: Callable[..., list[Manifest]]) -> None:
    objects = render({}, release="x", namespace="gpu")
    policy = one(objects, "ValidatingAdmissionPolicy")
    binding = one(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    condition = policy["spec"]["matchConditions"][0]["expression"]
    assert "system:serviceaccount:gpu:x-tessera-agent" in condition
    assert "system:serviceaccount:gpu:x-tessera-device-plugin" in condition
    assert policy["spec"]["failurePolicy"] == "Fail"


def test_agent_and_plugin_run_apart_under_their_own_accounts(default_objects: list[Manifest]) -> None:
    by_name = {
        d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in find(default_objects, "DaemonSet")
    }
    assert set(by_name) == {"tessera-agent", "tessera-device-plugin"}
    assert by_name["tessera-agent"]["serviceAccountName"] == "tessera-agent"
    assert by_name["tessera-device-plugin"]["serviceAccountName"] == "tessera-device-plugin"
    assert by_name["tessera-agent"]["hostPID"] is True
    assert "hostPID" not in by_name["tessera-device-plugin"], "the plugin needs no host PIDs"
    plugin = by_name["tessera-device-plugin"]["containers"][0]
    assert plugin["securityContext"]["capabilities"] == {"drop": ["ALL"]} and "ports" not in plugin


@pytest.mark.parametrize(("enforcement", "caps"), [("off", None), ("report", None), ("kill", ["KILL"])])
def test_cap_kill_only_in_kill_mode(
    render: Callable[..., list[Manifest]], enforcement: str, caps: list[str] | None
) -> None:
    ds = one(render({"agent": {"enforcement": enforcement}}), "DaemonSet", "tessera-agent")
    agent = ds["spec"]["template"]["spec"]["containers"][0]
    assert agent["securityContext"]["capabilities"].get("add") == caps
    assert agent["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_network_policies(default_objects: list[Manifest], render: Callable[..., list[Manifest]]) -> None:
    policies = {p["metadata"]["name"]: p["spec"] for p in find(default_objects, "NetworkPolicy")}
    assert set(policies) == {"tessera-scheduler", "tessera-agent", "tessera-device-plugin"}
    assert "ingress" not in policies["tessera-device-plugin"]  # nothing may connect to the plugin
    sched = policies["tessera-scheduler"]["ingress"]
    webhook_rule = next(r for r in sched if r["ports"][0]["port"] == 9443)
    assert "from" not in webhook_rule  # the API server, from wherever it runs
    http_rule = next(r for r in sched if r["ports"][0]["port"] == 8080)
    namespaces = [p["namespaceSelector"]["matchLabels"] for p in http_rule["from"]]
    assert {"kubernetes.io/metadata.name": "tessera-system"} in namespaces
    assert {"tessera.dev/metrics-access": "true"} in namespaces
    for name, spec in policies.items():
        workloads = find(default_objects, "Deployment") + find(default_objects, "DaemonSet")
        selected = [w for w in workloads if spec["podSelector"]["matchLabels"].items()
                    <= w["spec"]["template"]["metadata"]["labels"].items()]  # fmt: skip
        assert len(selected) == 1, name
    assert not find(render({"networkPolicy": {"enabled": False}}), "NetworkPolicy")


def test_listen_addresses_follow_the_values(render: Callable[..., list[Manifest]]) -> None:
    objects = render({"scheduler": {"listenAddress": "10.1.2.3"}, "agent": {"listenAddress": "10.4.5.6"}})
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--listen=10.1.2.3:8080" in args and "--webhook-listen=10.1.2.3:9443" in args
    agent = one(objects, "DaemonSet", "tessera-agent")["spec"]["template"]["spec"]["containers"][0]
    assert "--listen=10.4.5.6:9400" in agent["args"]
