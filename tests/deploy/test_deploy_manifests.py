"""Plain manifests, examples, image and dashboard: valid, in sync with the chart, and consistent."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from node_agent.metrics import AgentMetrics
from scheduler.api import PodGroup, Queue, parse_gpu_request
from scheduler.api.keys import POD_GROUP, QUEUE_LABEL, SCHEDULER_NAME
from scheduler.framework.metrics import SchedulerMetrics
from tests.deploy.deploy_support import (
    CHART,
    EXAMPLES,
    MANIFESTS,
    ROOT,
    Manifest,
    find,
    load_yaml_docs,
    needs_helm,
    one,
    render_chart,
    validate_object,
)


def test_manifests_are_in_sync_with_the_chart() -> None:
    needs_helm()
    wanted = render_chart.manifest_files()
    on_disk = {str(p.relative_to(MANIFESTS)): p.read_text() for p in MANIFESTS.rglob("*.yaml")}
    assert on_disk == wanted, "deploy/manifests is stale: run python scripts/render_chart.py"
    assert render_chart.main(["--check"]) == 0


def test_check_mode_notices_a_hand_edit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    needs_helm()
    assert render_chart.main(["--out", str(tmp_path)]) == 0
    edited = tmp_path / "tessera.yaml"
    edited.write_text(edited.read_text().replace("replicas: 2", "replicas: 1"))
    assert render_chart.main(["--check", "--out", str(tmp_path)]) == 1
    assert "stale: " in capsys.readouterr().out


def test_plain_manifests_are_valid() -> None:
    how: dict[str, int] = {}
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for obj in load_yaml_docs(path):
            kind = validate_object(obj)
            how[kind] = how.get(kind, 0) + 1
    assert how["kubernetes"] >= 20 and how["crd"] >= 1 and how["third-party"] == 2
    for obj in load_yaml_docs(MANIFESTS / "kai-compat" / "tessera.yaml"):
        assert validate_object(obj) == "kubernetes"


def test_kai_compat_manifests_replace_what_kai_compatibility_changes() -> None:
    """deploy/manifests/kai-compat/ (applied after tessera.yaml, run by `tessera sandbox up --kai-compat`):
    the objects of tessera.yaml that kaiCompat and the KAI scheduler name change, and nothing else."""
    plain = {(o["kind"], o["metadata"]["name"]): o for o in load_yaml_docs(MANIFESTS / "tessera.yaml")}
    kai = load_yaml_docs(MANIFESTS / "kai-compat" / "tessera.yaml")
    assert {(o["kind"], o["metadata"]["name"]) for o in kai} <= set(plain)
    (deployment,) = [o for o in kai if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--kai-compat" in args and "--scheduler-name=kai-scheduler" in args
    (role,) = [o for o in kai if o["kind"] == "ClusterRole"]
    assert any("scheduling.run.ai" in r["apiGroups"] for r in role["rules"])
    hooks = [o for o in kai if o["kind"].endswith("WebhookConfiguration")]
    assert hooks and all("'kai-scheduler'" in str(o["webhooks"]) for o in hooks)


def test_plain_manifests_create_their_namespace_first_and_use_cert_manager() -> None:
    objects = load_yaml_docs(MANIFESTS / "tessera.yaml")
    assert objects[0]["kind"] == "Namespace"
    namespace = objects[0]["metadata"]["name"]
    assert all(o["metadata"].get("namespace", namespace) == namespace for o in objects)
    assert not find(objects, "Secret"), "no private key may be committed in the plain manifests"
    assert one(objects, "Certificate")["spec"]["secretName"]
    kinds = [o["kind"] for o in objects]
    assert kinds.index("Certificate") < kinds.index("MutatingWebhookConfiguration")
    assert {o["kind"] for o in load_yaml_docs(MANIFESTS / "crds.yaml")} == {"CustomResourceDefinition"}


def test_plain_manifests_keep_the_rbac_reasons() -> None:
    text = (MANIFESTS / "tessera.yaml").read_text()
    assert "# Binding subresource" in text and "# Eviction API" in text


def _examples() -> list[tuple[str, Manifest]]:
    return [(p.name, obj) for p in sorted(EXAMPLES.glob("*.yaml")) for obj in load_yaml_docs(p)]


def test_examples_exist() -> None:
    names = {p.name for p in EXAMPLES.glob("*.yaml")}
    assert {"queues.yaml", "fractional-pod.yaml", "gang-job.yaml"} <= names


@pytest.mark.parametrize(("name", "obj"), _examples(), ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_example_is_valid(name: str, obj: Manifest) -> None:
    validate_object(obj)
    if obj["kind"] == "Queue":
        Queue.model_validate(obj)
    if obj["kind"] == "PodGroup":
        PodGroup.model_validate(obj)


def _pod_templates() -> list[tuple[str, Manifest]]:
    out = []
    for name, obj in _examples():
        if obj["kind"] == "Pod":
            out.append((name, obj))
        elif obj["kind"] in ("Job", "Deployment", "StatefulSet"):
            out.append((name, obj["spec"]["template"]))
    return out


def test_examples_use_leaf_queues_that_exist() -> None:
    queues = {q.name: q for q in (Queue.model_validate(o) for _, o in _examples() if o["kind"] == "Queue")}
    parents = {q.spec.parent_queue for q in queues.values() if q.spec.parent_queue}
    assert parents <= set(queues), "a parent queue is missing"
    assert len(queues.keys() - parents) >= 2, "two team (leaf) queues expected"
    used = [p["metadata"]["labels"][QUEUE_LABEL] for _, p in _pod_templates()]
    used += [o["spec"]["queue"] for _, o in _examples() if o["kind"] == "PodGroup"]
    for queue in used:
        assert queue in queues and queue not in parents, f"{queue} is not a leaf queue of the examples"


def test_examples_request_gpus_the_scheduler_accepts() -> None:
    kinds = set()
    for _, pod in _pod_templates():
        spec = pod["spec"]
        assert spec["schedulerName"] == SCHEDULER_NAME
        limits: dict[str, Any] = {}
        for c in spec["containers"]:
            limits.update(c.get("resources", {}).get("limits", {}))
        request = parse_gpu_request(pod["metadata"].get("annotations", {}), limits)
        kinds.add((request.kind, request.milli))
    assert ("fraction", 500) in kinds, "the fractional example must ask for half a GPU"
    assert ("whole", 1000) in kinds


def test_gang_example_fits_its_podgroup() -> None:
    objects = [o for n, o in _examples() if n == "gang-job.yaml"]
    group = PodGroup.model_validate(one(objects, "PodGroup"))
    job = one(objects, "Job")
    assert job["spec"]["template"]["metadata"]["annotations"][POD_GROUP] == group.metadata.name
    assert job["metadata"]["namespace"] == group.metadata.namespace
    assert job["spec"]["parallelism"] >= group.spec.min_member


def test_dockerfile() -> None:
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM\s+(\S+)", text, flags=re.MULTILINE)
    assert stages and all(s == "python:3.11-slim" for s in stages if not s.startswith("build"))
    users = re.findall(r"^USER\s+(\S+)", text, flags=re.MULTILINE)
    assert users and users[-1].split(":")[0] == "10001", "the image must end as the non-root user"
    assert "pip install ." in text
    # The chart's non-root scheduler matches the image's user.
    deployment = one(load_yaml_docs(MANIFESTS / "tessera.yaml"), "Deployment")
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", "tests", "**/__pycache__"} <= set(ignored)
    for needed in ("scheduler", "node_agent", "device_plugin", "pyproject.toml"):
        assert needed not in ignored


def test_chart_entry_points_are_console_scripts() -> None:
    """Every `command` in the chart must be a console script the package installs."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("scripts", {})
    objects = load_yaml_docs(MANIFESTS / "tessera.yaml")
    commands = {
        c["command"][0]
        for w in find(objects, "Deployment") + find(objects, "DaemonSet")
        for c in w["spec"]["template"]["spec"]["containers"]
    }
    assert commands == {"tessera-scheduler", "tessera-agent", "tessera-device-plugin"}
    if not commands & set(scripts):
        pytest.skip("the components' console scripts are not in pyproject.toml yet")
    assert commands <= set(scripts), f"missing console scripts: {sorted(commands - set(scripts))}"


DASHBOARD = CHART / "dashboards" / "tessera.json"
# Series the dashboard reads; docs/install.md lists the same names for the components to export.
DASHBOARD_METRICS = {
    "tessera_cycle_duration_seconds_bucket",
    "tessera_action_duration_seconds_bucket",
    "tessera_pods_scheduled_total",
    "tessera_pods_evicted_total",
    "tessera_pending_pods",
    "tessera_queue_fair_share",
    "tessera_queue_allocated",
    "tessera_queue_quota",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "tessera_pod_gpu_memory_used_bytes",
    "tessera_pod_gpu_memory_limit_bytes",
    "tessera_gpu_allocated_milli",
}
_PROMQL_WORDS = {"sum", "by", "rate", "histogram_quantile", "label_values", "le", "on", "group_left"}


def _metric_names(expr: str) -> set[str]:
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", "", expr)  # drop selectors, ranges, strings
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", expr))
    return {n for n in names if ("_" in n and n not in _PROMQL_WORDS) and not n.startswith("__")}


def _exported(registry: CollectorRegistry) -> set[str]:
    """The series names a registry exports, with the suffixes of each metric type."""
    suffixes = {
        "counter": ("_total",),
        "histogram": ("_bucket", "_count", "_sum"),
        "summary": ("_count", "_sum"),
    }
    return {f.name + suffix for f in registry.collect() for suffix in suffixes.get(f.type, ("",))}


def test_dashboard_reads_the_documented_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    used: set[str] = set()
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used |= _metric_names(target["expr"])
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            used |= _metric_names(var["query"]["query"])
    assert used == DASHBOARD_METRICS
    # Every series the dashboard reads is one a component exports (the scheduler's names once differed
    # from the dashboard's, and its panels stayed empty).
    exported = _exported(SchedulerMetrics().registry) | _exported(AgentMetrics("node-1").registry)
    assert not used - exported, f"no component exports {sorted(used - exported)}"
    docs = (ROOT / "docs" / "install.md").read_text()
    undocumented = {m.removesuffix("_bucket") for m in used if m.removesuffix("_bucket") not in docs}
    assert not undocumented, f"docs/install.md does not list {sorted(undocumented)}"


def test_install_guide_covers_the_steps() -> None:
    docs = (ROOT / "docs" / "install.md").read_text()
    for step in (
        "helm install",
        "kubectl label node",
        "examples/install/queues.yaml",
        'gpu-fraction: "0.5"',
        "kubectl get gpunodereports",
        "tessera nodes",
        "helm uninstall",
        "deploy/manifests",
    ):
        assert step in docs, step
    assert "# Install on a cluster" in docs or "## Install on a cluster" in docs


def test_values_files_merge_like_helm() -> None:
    """Later -f files and --set override earlier ones key by key, as with helm."""
    merged = render_chart.deep_merge(
        {"scheduler": {"replicas": 3, "logLevel": "info"}, "a": [1]},
        {"scheduler": {"logLevel": "debug"}, "a": [2]},
    )
    assert merged == {"scheduler": {"replicas": 3, "logLevel": "debug"}, "a": [2]}
