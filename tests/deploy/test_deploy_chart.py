"""The Helm chart rendered offline with default and custom values: valid objects that fit together."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scheduler.api import Queue
from scheduler.api.keys import DEFAULT_QUEUE, SCHEDULER_NAME
from scheduler.api.priority import PRIORITY_CLASSES
from tests.deploy.deploy_support import (
    CHART,
    CUSTOM_VALUES,
    THIRD_PARTY_KINDS,
    Manifest,
    find,
    needs_helm,
    one,
    render_chart,
    validate_object,
)

DEFAULT_KINDS = {
    "PriorityClass",
    "ServiceAccount",
    "Secret",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Service",
    "DaemonSet",
    "Deployment",
    "PodDisruptionBudget",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "NetworkPolicy",
    "Queue",
}


def containers(workload: Manifest) -> dict[str, Manifest]:
    return {c["name"]: c for c in workload["spec"]["template"]["spec"]["containers"]}


def test_default_render_has_every_component(default_objects: list[Manifest]) -> None:
    assert {o["kind"] for o in default_objects} == DEFAULT_KINDS
    for obj in default_objects:
        validate_object(obj)


def test_custom_renders_are_valid(custom_case: Any) -> None:
    _, _, objects = custom_case
    assert objects
    for obj in objects:
        validate_object(obj)
    assert {o["kind"] for o in objects if o["kind"] in THIRD_PARTY_KINDS} <= THIRD_PARTY_KINDS


def test_namespaced_objects_land_in_the_release_namespace(render: Callable[..., list[Manifest]]) -> None:
    objects = render({}, release="gpu", namespace="batch")
    cluster_scoped = {
        "PriorityClass",
        "ClusterRole",
        "ClusterRoleBinding",
        "Queue",
        "Namespace",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for obj in objects:
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], obj["kind"]
        else:
            assert obj["metadata"]["namespace"] == "batch", obj["kind"]
    deployment = one(objects, "Deployment")
    assert deployment["metadata"]["name"] == "gpu-tessera-scheduler"


def test_scheduler_deployment(default_objects: list[Manifest]) -> None:
    deployment = one(default_objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    (scheduler,) = pod["containers"]
    assert scheduler["command"] == ["tessera-scheduler"]
    args = scheduler["args"]
    assert "--leader-elect" in args
    assert "--leader-elect-namespace=$(POD_NAMESPACE)" in args
    assert f"--scheduler-name={SCHEDULER_NAME}" in args
    env = {e["name"] for e in scheduler["env"]}
    assert {"POD_NAME", "POD_NAMESPACE"} <= env
    # Non-root, read-only, no capabilities: the scheduler only talks HTTP.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert scheduler["securityContext"]["readOnlyRootFilesystem"] is True
    assert scheduler["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert scheduler["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert scheduler["resources"]["requests"] and scheduler["resources"]["limits"]
    pdb = one(default_objects, "PodDisruptionBudget")
    assert (
        pdb["spec"]["selector"]["matchLabels"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    assert pdb["spec"]["maxUnavailable"] == 1
    # Leader election has a Lease to hold, named in the Role.
    role = one(default_objects, "Role")
    lease_name = next(a.split("=", 1)[1] for a in args if a.startswith("--leader-elect-lease-name="))
    assert any(lease_name in r.get("resourceNames", []) for r in role["rules"])


def test_services_select_their_pods_and_ports(render: Callable[..., list[Manifest]]) -> None:
    for values in ({}, {"metrics": {"serviceMonitor": {"enabled": True}}}):
        objects = render(values)
        workloads = find(objects, "Deployment") + find(objects, "DaemonSet")
        for svc in find(objects, "Service"):
            selector = svc["spec"]["selector"]
            matches = [
                w
                for w in workloads
                if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
            ]
            assert len(matches) == 1, f"Service {svc['metadata']['name']} selects {len(matches)} workloads"
            port_names = {p["name"] for c in containers(matches[0]).values() for p in c.get("ports", [])}
            for port in svc["spec"]["ports"]:
                assert port["targetPort"] in port_names
        for monitor in find(objects, "ServiceMonitor"):
            labels = monitor["spec"]["selector"]["matchLabels"]
            (svc,) = [
                s for s in find(objects, "Service") if labels.items() <= s["metadata"]["labels"].items()
            ]
            assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {
                p["name"] for p in svc["spec"]["ports"]
            }


def test_node_daemonsets(default_objects: list[Manifest]) -> None:
    agent_ds = one(default_objects, "DaemonSet", "tessera-agent")
    plugin_ds = one(default_objects, "DaemonSet", "tessera-device-plugin")
    for ds in (agent_ds, plugin_ds):
        pod = ds["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    assert agent_ds["spec"]["template"]["spec"]["hostPID"] is True
    agent_paths = {v["name"]: v["hostPath"]["path"] for v in agent_ds["spec"]["template"]["spec"]["volumes"]
                   if "hostPath" in v}  # fmt: skip
    plugin_paths = {v["name"]: v["hostPath"]["path"] for v in plugin_ds["spec"]["template"]["spec"]["volumes"]
                    if "hostPath" in v}  # fmt: skip
    assert agent_paths == {"host-proc": "/proc"}
    # nothing more of the host: its plugin socket dir and the kubelet's PodResources socket
    assert plugin_paths == {"device-plugins": "/var/lib/kubelet/device-plugins",
                            "pod-resources": "/var/lib/kubelet/pod-resources"}  # fmt: skip
    (agent,) = containers(agent_ds).values()
    (plugin,) = containers(plugin_ds).values()
    assert agent["command"] == ["tessera-agent"] and plugin["command"] == ["tessera-device-plugin"]
    plugin_mounts = {m["name"]: m["mountPath"] for m in plugin["volumeMounts"]}
    assert plugin_mounts["device-plugins"] == "/var/lib/kubelet/device-plugins"
    assert plugin_mounts["pod-resources"] == "/var/lib/kubelet/pod-resources"
    assert {m["name"]: m.get("readOnly") for m in plugin["volumeMounts"]}["pod-resources"] is True
    assert "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock" in plugin["args"]
    assert {m["name"]: m.get("readOnly") for m in agent["volumeMounts"]}["host-proc"] is True
    agent_port = {p["name"]: p["containerPort"] for p in agent["ports"]}["metrics"]
    assert f"--listen=0.0.0.0:{agent_port}" in agent["args"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert agent[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    for container in (agent, plugin):
        assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
        assert container["securityContext"]["runAsUser"] == 0
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container[
            "env"
        ]
    assert "--whole-gpu-resource=nvidia.com/gpu" in plugin["args"]


def test_daemonset_follows_values(render: Callable[..., list[Manifest]]) -> None:
    objects = render(
        {
            "devicePlugin": {"wholeGPUResource": "", "kubeletDir": "/data/kubelet/"},
            "nodeDaemonSet": {"runtimeClassName": "nvidia"},
            "agent": {"enforcement": "kill"},
        }
    )
    agent_ds = one(objects, "DaemonSet", "tessera-agent")
    plugin_ds = one(objects, "DaemonSet", "tessera-device-plugin")
    for ds in (agent_ds, plugin_ds):
        assert ds["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    # An empty value must reach the plugin: without the flag it would serve its default, nvidia.com/gpu.
    assert "--whole-gpu-resource=" in containers(plugin_ds)["tessera-device-plugin"]["args"]
    assert "--enforcement=kill" in containers(agent_ds)["tessera-agent"]["args"]
    pod = plugin_ds["spec"]["template"]["spec"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths["device-plugins"] == "/data/kubelet/device-plugins"


def test_priority_classes_match_the_contract(default_objects: list[Manifest]) -> None:
    rendered = {p["metadata"]["name"]: p["value"] for p in find(default_objects, "PriorityClass")}
    assert rendered == {name: info.value for name, info in PRIORITY_CLASSES.items()}
    assert rendered == {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}


def test_default_queue_is_a_valid_queue(default_objects: list[Manifest]) -> None:
    queue = Queue.model_validate(one(default_objects, "Queue"))
    assert queue.name == DEFAULT_QUEUE
    assert queue.spec.parent_queue is None
    assert queue.spec.resources.gpu.limit == -1


def _secret_volume(objects: list[Manifest]) -> str:
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    return next(v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v)


def _webhooks(objects: list[Manifest]) -> list[Manifest]:
    return [
        hook
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for hook in one(objects, kind)["webhooks"]
    ]


def test_webhooks_reach_the_scheduler_service(default_objects: list[Manifest]) -> None:
    svc = one(default_objects, "Service", "tessera-scheduler")
    ports = {p["port"] for p in svc["spec"]["ports"]}
    hooks = _webhooks(default_objects)
    assert len(hooks) == 4
    for hook in hooks:
        ref = hook["clientConfig"]["service"]
        assert (ref["name"], ref["namespace"]) == (svc["metadata"]["name"], svc["metadata"]["namespace"])
        assert ref["port"] in ports
        groups = hook["name"] == "podgroups.validate.tessera.dev"
        assert hook["rules"][0]["resources"] == (["podgroups"] if groups else ["pods"])
    conditions = {c["name"]: c["expression"] for h in hooks for c in h.get("matchConditions", [])}
    assert f"object.spec.schedulerName == '{SCHEDULER_NAME}'" in conditions["tessera-pods-only"]
    sa = one(default_objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert f"system:serviceaccount:tessera-system:{sa}" in conditions["not-the-schedulers-update"]
    assert f"system:serviceaccount:tessera-system:{sa}" in conditions["not-the-scheduler"]  # the podgrouper
    guard = conditions["guarded-annotation-written-by-someone-else"]
    assert f"system:serviceaccount:tessera-system:{sa}" in guard and "tessera.dev/gpu-assignment" in guard
    assert "system:serviceaccount:tessera-system:tessera-device-plugin" in guard
    assert "tessera.dev/gpu-allocated" in guard
    validate = next(h for h in hooks if h["name"] == "pods.validate.tessera.dev")
    assert validate["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    args = one(default_objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert (
        "--webhook-device-plugin-users=system:serviceaccount:$(POD_NAMESPACE):tessera-device-plugin" in args
    )


def _pem(b64: str) -> bytes:
    return base64.b64decode(b64)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_self_signed_certificate_is_consistent(default_objects: list[Manifest], tmp_path: Path) -> None:
    secret = one(default_objects, "Secret")
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["name"] == _secret_volume(default_objects)
    bundles = {h["clientConfig"]["caBundle"] for h in _webhooks(default_objects)}
    assert bundles == {secret["data"]["ca.crt"]}, "every webhook must trust the CA that signed the secret"
    (tmp_path / "ca.pem").write_bytes(_pem(secret["data"]["ca.crt"]))
    (tmp_path / "tls.pem").write_bytes(_pem(secret["data"]["tls.crt"]))
    (tmp_path / "key.pem").write_bytes(_pem(secret["data"]["tls.key"]))
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tmp_path / "ca.pem"), str(tmp_path / "tls.pem")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verify.returncode == 0, verify.stderr
    sans = subprocess.run(
        ["openssl", "x509", "-in", str(tmp_path / "tls.pem"), "-noout", "-ext", "subjectAltName"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "DNS:tessera-scheduler.tessera-system.svc" in sans
    modulus = [
        subprocess.run(
            ["openssl", cmd, "-in", str(tmp_path / f), "-noout", "-modulus"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for cmd, f in (("x509", "tls.pem"), ("rsa", "key.pem"))
    ]
    assert modulus[0] == modulus[1], "the key does not belong to the certificate"


def test_cert_manager_mode(render: Callable[..., list[Manifest]]) -> None:
    objects = render({"certManager": {"enabled": True}})
    assert not find(objects, "Secret"), "cert-manager writes the secret; the chart must not"
    cert = one(objects, "Certificate")
    issuer = one(objects, "Issuer")
    assert cert["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    assert cert["spec"]["secretName"] == _secret_volume(objects)
    assert "tessera-scheduler.tessera-system.svc" in cert["spec"]["dnsNames"]
    inject = f"{cert['metadata']['namespace']}/{cert['metadata']['name']}"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = one(objects, kind)
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == inject
        assert all("caBundle" not in h["clientConfig"] for h in config["webhooks"])
    own = render({"certManager": {"enabled": True, "issuerRef": {"name": "corp", "kind": "ClusterIssuer"}}})
    assert not find(own, "Issuer")
    assert one(own, "Certificate")["spec"]["issuerRef"] == {"name": "corp", "kind": "ClusterIssuer"}


def test_custom_values_take_effect(render: Callable[..., list[Manifest]]) -> None:
    objects = render(
        {
            "scheduler": {"replicas": 3, "placement": "fgd", "extraArgs": ["--verbose"]},
            "schedulerName": "gpu-batch",
            "image": {"repository": "registry.example/tessera", "tag": "1.2.3"},
            "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
            "grafana": {"dashboard": {"enabled": True}},
        }
    )
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    (scheduler,) = deployment["spec"]["template"]["spec"]["containers"]
    assert scheduler["image"] == "registry.example/tessera:1.2.3"
    assert {"--placement=fgd", "--verbose", "--scheduler-name=gpu-batch"} <= set(scheduler["args"])
    assert all(
        c["image"] == "registry.example/tessera:1.2.3"
        for ds in find(objects, "DaemonSet")
        for c in containers(ds).values()
    )
    monitors = find(objects, "ServiceMonitor")
    assert len(monitors) == 2 and all(m["metadata"]["labels"]["release"] == "prom" for m in monitors)
    expressions = [c["expression"] for h in _webhooks(objects) for c in h.get("matchConditions", [])]
    assert any("'gpu-batch'" in e for e in expressions)
    dashboard = one(objects, "ConfigMap")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "tessera.json").read_text())
    assert json.loads(dashboard["data"]["tessera.json"]) == shipped


def test_components_can_be_switched_off(render: Callable[..., list[Manifest]]) -> None:
    objects = render(
        {
            "scheduler": {"replicas": 1, "leaderElection": {"enabled": False}},
            "devicePlugin": {"enabled": False},
            "priorityClasses": {"create": False},
            "defaultQueue": {"create": False},
        }
    )
    assert not find(objects, "Role") and not find(objects, "PriorityClass") and not find(objects, "Queue")
    assert not find(objects, "PodDisruptionBudget"), "a PDB on a single replica would block node drains"
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(a.startswith("--leader-elect") for a in args)
    assert [d["metadata"]["name"] for d in find(objects, "DaemonSet")] == ["tessera-agent"]
    assert {r["metadata"]["name"] for r in find(objects, "ClusterRole")} == {
        "tessera-scheduler",
        "tessera-agent",
        "tessera-view",
        "tessera-edit",
    }
    no_user_roles = render({"userRoles": {"aggregate": False}})
    assert {r["metadata"]["name"] for r in find(no_user_roles, "ClusterRole")} == {
        "tessera-scheduler",
        "tessera-agent",
        "tessera-device-plugin",
    }
    no_webhook = render({"webhook": {"enabled": False}, "agent": {"enabled": False}})
    assert not find(no_webhook, "MutatingWebhookConfiguration") and not find(no_webhook, "Secret")
    assert [d["metadata"]["name"] for d in find(no_webhook, "DaemonSet")] == ["tessera-device-plugin"]
    assert not find(no_webhook, "Service", "tessera-agent")


def test_bindings_and_service_accounts_line_up(custom_case: Any) -> None:
    _, _, objects = custom_case
    accounts = {(a["metadata"]["namespace"], a["metadata"]["name"]) for a in find(objects, "ServiceAccount")}
    roles = {(r["kind"], r["metadata"]["name"]) for r in find(objects, "ClusterRole") + find(objects, "Role")}
    for binding in find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding"):
        assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) in roles
        for subject in binding["subjects"]:
            assert (subject["namespace"], subject["name"]) in accounts
    for workload in find(objects, "Deployment") + find(objects, "DaemonSet"):
        pod = workload["spec"]["template"]["spec"]
        assert (workload["metadata"]["namespace"], pod["serviceAccountName"]) in accounts


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"scheduler": {"replicas": "two"}}, "/scheduler/replicas"),
        ({"agent": {"enforcement": "nuke"}}, "/agent/enforcement"),
        ({"schedulerNmae": "tessera"}, "schedulerNmae"),
        ({"webhook": {"failurePolicy": "Sometimes"}}, "/webhook/failurePolicy"),
    ],
)
def test_bad_values_are_rejected_in_one_line(values: dict[str, Any], complaint: str) -> None:
    """values.schema.json stops typos and bad enums before anything reaches a cluster."""
    needs_helm()
    with pytest.raises(render_chart.RenderError) as err:
        render_chart.render(values)
    assert "\n" not in str(err.value)
    assert complaint in str(err.value)


def test_render_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    needs_helm()
    values = tmp_path / "values.yaml"
    values.write_text("scheduler:\n  replicas: 5\n")
    assert render_chart.main(["-f", str(values), "--set", "agent.enforcement=off", "-n", "gpu"]) == 0
    out = capsys.readouterr().out
    assert "replicas: 5" in out and "--enforcement=off" in out and "namespace: gpu" in out
    assert render_chart.main(["--set", "novalue"]) == 2


@pytest.mark.parametrize("case", ["default", *sorted(CUSTOM_VALUES)])
def test_helm_lint_is_clean(case: str) -> None:
    """`helm lint --strict` for the oldest supported Kubernetes: no warnings, no errors."""
    needs_helm()
    import helm_python

    values = CUSTOM_VALUES.get(case, {})
    report = helm_python.lint(str(CHART), values, strict=True, kube_version="v1.30.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], problems or report["errors"]
