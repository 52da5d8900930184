"""`kubectl tessera why POD` and `kubectl tessera queues` on the real API server, reading what the real
scheduling loop wrote there."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from rich.console import Console
from typer.testing import CliRunner

from scheduler.cli.cluster_reader import KubeReader
from scheduler.cli.kubectl import app as kubectl_app
from scheduler.cli.queues import queue_rows, queue_table, with_kai
from scheduler.cli.why import explain
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.kube.cluster import KubeCluster
from scheduler.sandbox.controlplane import ControlPlane
from tests.kube.helpers import pod_body, wait_for

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "deploy" / "helm" / "tessera" / "crds"
G = "scheduling.tessera.dev"


@pytest.mark.apiserver
def test_why_and_queues_tell_what_the_scheduler_wrote(
    control_plane: ControlPlane, kube_admin: client.ApiClient, namespace: str
) -> None:
    control_plane.kubectl("apply", "-f", str(CRDS))
    control_plane.kubectl("wait", "--for", "condition=established", "--timeout=30s", "-f", str(CRDS))
    suffix = uuid.uuid4().hex[:6]
    team, parent = f"why-team-{suffix}", f"why-org-{suffix}"
    custom, core = client.CustomObjectsApi(kube_admin), client.CoreV1Api(kube_admin)
    for name, spec in (
        (parent, {"resources": {"gpu": {"quota": 8}}}),
        (
            team,
            {"parentQueue": parent, "resources": {"gpu": {"quota": 2, "limit": 4}, "cpu": {"quota": "500m"}}},
        ),
    ):
        custom.create_cluster_custom_object(
            G,
            "v1alpha1",
            "queues",
            {"apiVersion": f"{G}/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec},
        )
    core.create_namespaced_pod(
        namespace,
        pod_body(
            "big", namespace=namespace, labels={"tessera.dev/queue": team}, limits={"nvidia.com/gpu": "64"}
        ),
    )
    core.create_namespaced_pod(
        namespace,
        pod_body(
            "bad",
            namespace=namespace,
            labels={"tessera.dev/queue": team},
            annotations={"gpu-fraction": "1.5"},
        ),
    )
    core.create_namespaced_pod(
        namespace, pod_body("astray", namespace=namespace, labels={"tessera.dev/queue": parent})
    )
    cluster = KubeCluster(kube_admin, podgrouper=False).start()
    try:
        assert cluster.wait_synced(10)
        scheduler = Scheduler(cluster, SchedulerConfig())

        def reported() -> bool:
            scheduler.run_cycle()
            conditions = core.read_namespaced_pod("big", namespace).status.conditions or []
            return any(c.type == "PodScheduled" and c.status == "False" for c in conditions)

        wait_for(reported, timeout=20, interval=0.2)
        reader = KubeReader(kube_admin)
        big = explain(reader, namespace, "big")
        assert big is not None and big.state == "Pending"
        assert "asks for 64 whole GPUs" in big.facts[0]
        assert any(f.startswith(f"queue {team}: GPU quota 2, limit 4") for f in big.facts)
        assert f"queue {team} would exceed its gpu limit (0 allocated + 64 requested > 4)" in big.reasons[0]
        bad = explain(reader, namespace, "bad")
        assert bad is not None and any("invalid request" in r and "gpu-fraction" in r for r in bad.reasons)
        astray = explain(reader, namespace, "astray")
        assert astray is not None and any(f"queue {parent} is not a leaf queue" in r for r in astray.reasons)
        assert explain(reader, namespace, "nobody") is None

        runner = CliRunner()
        kubeconfig = str(control_plane.admin_kubeconfig)
        out = runner.invoke(
            kubectl_app, ["why", f"{namespace}/big", "--kubeconfig", kubeconfig, "-o", "json"]
        )
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["pod"] == f"{namespace}/big"
        text = runner.invoke(kubectl_app, ["why", "bad", "-n", namespace, "--kubeconfig", kubeconfig])
        assert text.exit_code == 0 and "gpu-fraction" in text.stdout
        missing = runner.invoke(kubectl_app, ["why", "nobody", "-n", namespace, "--kubeconfig", kubeconfig])
        # A pod that does not exist is the user's mistake: exit 2, as every command promises (README).
        assert missing.exit_code == 2 and missing.stderr.startswith("error: pod ")

        listed = runner.invoke(kubectl_app, ["queues", "--kubeconfig", kubeconfig, "-o", "json"])
        assert listed.exit_code == 0, listed.output
        rows = {q["name"]: q for q in json.loads(listed.stdout)["queues"]}
        assert rows[team]["parent"] == parent and rows[team]["cpuCores"]["quota"] == 0.5
        assert rows[team]["gpu"]["quota"] == 2 and rows[parent]["leaf"] is False
        table = runner.invoke(kubectl_app, ["queues", "--kubeconfig", kubeconfig])
        assert f"  {team}" in table.stdout  # indented under its parent
    finally:
        cluster.stop()
        for name in (team, parent):
            custom.delete_cluster_custom_object(G, "v1alpha1", "queues", name)


def test_queue_rows_report_what_the_scheduler_ignores() -> None:
    rows, problems = queue_rows(
        [
            {
                "kind": "Queue",
                "metadata": {"name": "ok"},
                "spec": {"resources": {"memory": {"quota": "64Gi"}}},
            },
            {"kind": "Queue", "metadata": {"name": "lost"}, "spec": {"parentQueue": "nowhere"}},
            {"kind": "Queue", "metadata": {"name": "bad"}, "spec": {"resources": {"cpu": {"quota": 0.5}}}},
        ]
    )
    names = [r.name for r in rows]
    assert "ok" in names and "lost" in names and "bad" not in names
    assert next(r for r in rows if r.name == "ok").to_json()["memoryGiB"]["quota"] == 64
    assert any("queue bad is invalid" in p and 'fractions as a string, e.g. "0.5"' in p for p in problems)
    assert any("queue lost: parent queue nowhere does not exist" in p for p in problems)


def test_queues_show_the_minimum_runtimes_each_queue_gets() -> None:
    rows, problems = queue_rows(
        [
            {"kind": "Queue", "metadata": {"name": "lab"}, "spec": {"preemptMinRuntime": "5m"}},
            {
                "kind": "Queue",
                "metadata": {"name": "research"},
                "spec": {"parentQueue": "lab", "reclaimMinRuntime": "10m"},
            },
            {"kind": "Queue", "metadata": {"name": "bad"}, "spec": {"reclaimMinRuntime": "-5s"}},
        ]
    )
    research = next(r for r in rows if r.name == "research")
    assert research.to_json()["minRuntimeSeconds"] == {"preempt": 300, "reclaim": 600}  # preempt inherited
    assert any("queue bad is invalid" in p and "cannot be negative" in p for p in problems)
    table = Console(width=200, record=True)
    table.print(queue_table(rows))
    text = table.export_text()
    assert "MIN RUNTIME P/R" in text and "5m/10m" in text


@pytest.mark.apiserver
def test_why_gives_a_gang_member_its_gangs_priority_and_a_finished_pod_no_wait(
    control_plane: ControlPlane, kube_admin: client.ApiClient, namespace: str
) -> None:
    """A pod of a gang whose PodGroup names a priority class is scheduled with the gang's priority (the
    class's value in the cluster), not its own 0; a Failed pod is not said to wait, and says why it failed."""
    control_plane.kubectl("apply", "-f", str(CRDS))
    control_plane.kubectl("wait", "--for", "condition=established", "--timeout=30s", "-f", str(CRDS))
    suffix = uuid.uuid4().hex[:6]
    cls = f"train-{suffix}"
    custom, core = client.CustomObjectsApi(kube_admin), client.CoreV1Api(kube_admin)
    scheduling = client.SchedulingV1Api(kube_admin)
    scheduling.create_priority_class({"metadata": {"name": cls}, "value": 42})
    try:
        custom.create_namespaced_custom_object(G, "v1alpha1", namespace, "podgroups", {
            "apiVersion": f"{G}/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g"},
            "spec": {"minMember": 2, "priorityClassName": cls},
        })  # fmt: skip
        core.create_namespaced_pod(
            namespace, pod_body("member", namespace=namespace, annotations={"tessera.dev/pod-group": "g"})
        )
        core.create_namespaced_pod(namespace, pod_body("done", namespace=namespace))
        core.patch_namespaced_pod_status("done", namespace, {
            "status": {"phase": "Failed", "reason": "OutOfnvidia.com/gpu", "message": "no GPU left on node"}
        })  # fmt: skip
        reader = KubeReader(kube_admin)
        member = explain(reader, namespace, "member")
        assert member is not None and member.waiting
        assert f"priority 42 (preemptible, its gang's: PodGroup {namespace}/g names {cls})" in member.facts[0]
        done = explain(reader, namespace, "done")
        assert done is not None and done.state == "Failed" and not done.waiting
        assert "failed: OutOfnvidia.com/gpu: no GPU left on node" in done.facts
        kubeconfig = str(control_plane.admin_kubeconfig)
        text = CliRunner().invoke(kubectl_app, ["why", "done", "-n", namespace, "--kubeconfig", kubeconfig])
        assert text.exit_code == 0 and "why it waits" not in text.stdout, text.stdout
    finally:
        scheduling.delete_priority_class(cls)


KAI_EXAMPLES = ROOT / "examples" / "kai"


def test_queues_from_file_reads_kai_queues_as_the_scheduler_does() -> None:
    """`tessera queues --from-file` on a KAI user's queues (examples/kai/): translated as --kai-compat
    translates them (KAI's millicores and MB), not refused as queues of a foreign apiVersion."""
    out = CliRunner().invoke(
        kubectl_app,
        ["queues", "-o", "json", "--from-file", str(KAI_EXAMPLES / "queues.yaml"), "-f", str(KAI_EXAMPLES)],
    )
    assert out.exit_code == 0, out.output
    listed = json.loads(out.stdout)
    rows = {q["name"]: q for q in listed["queues"]}
    assert {"default-parent-queue", "default-queue", "research", "team-a", "team-b"} <= set(rows)
    assert rows["team-a"]["parent"] == "research" and rows["team-a"]["gpu"]["limit"] == 6
    assert rows["team-a"]["cpuCores"]["quota"] == 16  # KAI's 16000 millicores
    assert rows["team-a"]["memoryGiB"]["quota"] == round(65536e6 / 2**30, 3)  # KAI's 65536 MB
    assert not listed["problems"], listed["problems"]


def test_a_kai_queue_shadowed_or_invalid_is_named() -> None:
    kai = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue"}
    tessera = {"apiVersion": f"{G}/v1alpha1", "kind": "Queue"}
    objects, notes = with_kai(
        [
            {
                **kai,
                "metadata": {"name": "shared"},
                "spec": {"resources": {"gpu": {"quota": 1, "limit": -1}}},
            },
            {**tessera, "metadata": {"name": "shared"}, "spec": {}},
            {**kai, "metadata": {"name": "bad"}, "spec": {"resources": {"gpu": {"quota": "lots"}}}},
        ]
    )
    assert [o["apiVersion"] for o in objects] == [f"{G}/v1alpha1"]
    assert any("KAI queue shared is ignored: Tessera's Queue of the same name is used" in n for n in notes)
    assert any(n.startswith("KAI queue bad is invalid and ignored by the scheduler: ") for n in notes)
