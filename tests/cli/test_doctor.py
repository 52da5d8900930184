"""`tessera doctor` on the real API server, with the objects the chart renders: each broken piece is
named with its fix, and mending it turns the finding green."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, utils
from typer.testing import CliRunner

from node_agent.agent import Agent
from node_agent.nvml import open_backend
from node_agent.publisher import ReportPublisher
from scheduler.cli.cluster_reader import KubeReader
from scheduler.cli.doctor_checks import DoctorOptions, Finding, check_webhook, diagnose
from scheduler.cli.kubectl import app as kubectl_app
from scheduler.kube.leader import LeaseElector
from scheduler.sandbox.controlplane import ControlPlane
from tests.deploy.deploy_support import needs_helm, render_chart

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "deploy" / "helm" / "tessera" / "crds"
G = "scheduling.tessera.dev"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def about(findings: list[Finding], check: str, text: str) -> list[Finding]:
    return [f for f in findings if f.check == check and text in f.message]


@pytest.fixture
def chart_webhooks(kube_admin: client.ApiClient, namespace: str) -> Iterator[list[dict[str, Any]]]:
    """The chart's Service and webhook configurations for a release in `namespace` (no scheduler runs)."""
    needs_helm()
    release = f"doc{uuid.uuid4().hex[:6]}"
    objects = render_chart.render({}, release=release, namespace=namespace)
    wanted = [
        o
        for o in objects
        if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        or (o["kind"] == "Service" and "scheduler" in o["metadata"]["name"])
    ]
    for obj in wanted:
        utils.create_from_dict(kube_admin, obj)
    try:
        yield wanted
    finally:  # webhook configurations are cluster-wide: never leave them to other tests
        admission = client.AdmissionregistrationV1Api(kube_admin)
        for obj in wanted:
            if obj["kind"] == "MutatingWebhookConfiguration":
                admission.delete_mutating_webhook_configuration(obj["metadata"]["name"])
            elif obj["kind"] == "ValidatingWebhookConfiguration":
                admission.delete_validating_webhook_configuration(obj["metadata"]["name"])


@pytest.mark.apiserver
def test_doctor_names_each_problem_and_its_fix_on_the_real_api_server(
    control_plane: ControlPlane,
    kube_admin: client.ApiClient,
    namespace: str,
    chart_webhooks: list[dict[str, Any]],
) -> None:
    control_plane.kubectl("apply", "-f", str(CRDS))
    control_plane.kubectl("wait", "--for", "condition=established", "--timeout=30s", "-f", str(CRDS))
    core, custom = client.CoreV1Api(kube_admin), client.CustomObjectsApi(kube_admin)
    suffix = uuid.uuid4().hex[:6]
    node, orphan = f"doc-gpu-{suffix}", f"doc-orphan-{suffix}"
    opts = DoctorOptions(namespace=namespace, lease_name="tessera-scheduler", probe_namespace="default")
    reader = KubeReader(kube_admin)
    core.create_node({"metadata": {"name": node, "labels": {"nvidia.com/gpu.present": "true",
                                                             "nvidia.com/gpu.product": "NVIDIA-L4"}}})  # fmt: skip
    custom.create_cluster_custom_object(G, "v1alpha1", "queues", {
        "apiVersion": f"{G}/v1alpha1", "kind": "Queue", "metadata": {"name": orphan},
        "spec": {"parentQueue": "nowhere"}})  # fmt: skip
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "lost", "labels": {"tessera.dev/queue": f"no-such-{suffix}"}},
        "spec": {"schedulerName": "tessera", "containers": [{"name": "c", "image": "busybox"}]}})  # fmt: skip
    try:
        findings = diagnose(reader, opts)
        assert about(findings, "api", "reachable")[0].status == "ok"
        assert {f.status for f in findings if f.check == "crds"} == {"ok"}
        (lease,) = about(findings, "scheduler", "no scheduler holds the leader lease")
        # No scheduler pod exists in the namespace: the fix does not name one (it says where the logs of
        # parts run outside the cluster are, as `tessera sandbox` runs them).
        assert lease.status == "fail" and "logs deploy/tessera-scheduler" not in lease.fix
        assert f"no scheduler pod runs in namespace {namespace}" in lease.fix
        (no_report,) = about(findings, "nodes", f"node {node} has no GPUNodeReport")
        assert "tessera sandbox status" in no_report.fix and "-c tessera-agent" not in no_report.fix
        assert about(findings, "webhook", "has no ready endpoint")[0].status == "fail"
        (probe,) = about(findings, "webhook", "cannot call the webhook")
        assert probe.status == "fail" and "failed calling webhook" in probe.message
        assert (
            about(findings, "nodes", f"node {node} advertises no tessera.dev/gpu-slice")[0].status == "fail"
        )
        assert about(findings, "nodes", f"node {node} has no GPUNodeReport")[0].status == "fail"
        assert "23034 MiB" in about(findings, "nodes", f"node {node} has no nvidia.com/gpu.memory")[0].message
        assert (
            about(findings, "queues", f"queue {orphan}: parent queue nowhere does not exist")[0].status
            == "warn"
        )
        (lost,) = about(findings, "queues", f"pod {namespace}/lost: queue no-such-{suffix} does not exist")
        assert lost.status == "fail" and "kubectl label pod" in lost.fix

        result = CliRunner().invoke(
            kubectl_app,
            ["doctor", "-n", namespace, "--kubeconfig", str(control_plane.admin_kubeconfig)],
            prog_name="kubectl tessera",
        )
        assert result.exit_code == 1 and "✗ scheduler" in result.stdout and "fix:" in result.stdout

        # Mend what a running Tessera provides: the leader's Lease, the plugin's capacity (the kubelet's
        # job, done by hand until the sandbox's kubelet stand-in lands), the agent's report.
        elector = LeaseElector(
            client.CoordinationV1Api(kube_admin),
            name="tessera-scheduler",
            namespace=namespace,
            identity="sched-0",
        )
        assert elector.try_acquire_or_renew()  # what tessera-scheduler --leader-elect does
        core.patch_node_status(node, {"status": {"capacity": {"tessera.dev/gpu-slice": "2000"},
                                                 "allocatable": {"tessera.dev/gpu-slice": "2000"}}})  # fmt: skip
        # The node agent (on fake GPUs) writes the report, as on a GPU node.
        Agent(node, open_backend("2xL4-24GB", seed=node), publisher=ReportPublisher(custom)).tick()
        after = diagnose(reader, opts)
        assert about(after, "scheduler", "leader sched-0 renewed")[0].status == "ok"
        assert not about(after, "nodes", f"node {node} advertises no")
        assert not about(after, "nodes", f"node {node} has no GPUNodeReport")
        # Its GPUs' memory comes from the report: the missing label is nothing to warn about any more.
        assert not about(after, "nodes", "gpu.memory")
    finally:
        core.delete_node(node)
        custom.delete_cluster_custom_object(G, "v1alpha1", "queues", orphan)
        with contextlib.suppress(client.ApiException):
            custom.delete_cluster_custom_object(G, "v1alpha1", "gpunodereports", node)


class AnswersReader:
    """A reader whose answers are fixed objects, for the probe outcomes a healthy test cluster cannot give."""

    def __init__(self, objects: list[dict[str, Any]], refusal: str | None) -> None:
        self.objects, self.refusal = objects, refusal

    def server_version(self) -> str:
        return "v1.34.4"

    def list(
        self, kind: str, namespace: str | None = None, *, labels: str = "", fields: str = ""
    ) -> list[Any]:
        if kind == "EndpointSlice":
            return [{"endpoints": [{"conditions": {"ready": True}}]}]
        return [o for o in self.objects if o["kind"] == kind]

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return next((o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name), None)

    def dry_run_create(self, pod: dict[str, Any]) -> str | None:
        self.probed = pod
        return self.refusal


@pytest.mark.parametrize(
    ("refusal", "status", "text"),
    [
        (None, "fail", "was admitted"),
        (
            'admission webhook "pods.validate.tessera.dev" denied the request: annotation gpu-fraction="1.5" '
            "must be strictly between 0 and 1",
            "ok",
            "refused an invalid pod",
        ),
        ("serviceaccount default not found", "warn", "could not probe"),
    ],
)
def test_webhook_probe_outcomes(refusal: str | None, status: str, text: str) -> None:
    needs_helm()
    objects = render_chart.render({})
    findings = check_webhook(AnswersReader(objects, refusal), DoctorOptions())
    (probe,) = [f for f in findings if text in f.message]
    assert probe.status == status


@pytest.mark.parametrize(
    ("values", "name"),
    [({}, "tessera"), ({"kaiCompat": {"enabled": True}, "schedulerName": "kai-scheduler"}, "kai-scheduler")],
)
def test_the_probe_pod_names_the_scheduler_the_webhooks_match(values: dict[str, Any], name: str) -> None:
    """With the chart's kaiCompat (Tessera in KAI's place) the webhooks run only for pods of kai-scheduler:
    a probe pod of `tessera` would be admitted, and the doctor would call a healthy webhook broken."""
    needs_helm()
    reader = AnswersReader(render_chart.render(values), 'denied the request: annotation gpu-fraction="1.5"')
    (probe,) = [f for f in check_webhook(reader, DoctorOptions()) if "refused an invalid pod" in f.message]
    assert probe.status == "ok" and reader.probed["spec"]["schedulerName"] == name
