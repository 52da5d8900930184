"""`tessera simulate`: the built-in demo, user manifests, JSON shape and one-line errors."""

import json

import pytest
from typer.testing import CliRunner

from scheduler.api.duration import parse_duration
from scheduler.cli.main import app
from scheduler.placement.registry import DEFAULT_POLICY

runner = CliRunner()

MANIFESTS = """
apiVersion: v1
kind: Node
metadata: {name: gpu-1, labels: {nvidia.com/gpu.product: A100, nvidia.com/gpu.memory: "40960"}}
status: {capacity: {cpu: "32", memory: 256Gi, nvidia.com/gpu: "2"}}
---
apiVersion: scheduling.tessera.dev/v1alpha1
kind: Queue
metadata: {name: team}
spec: {resources: {gpu: {quota: 1, overQuotaWeight: 1, limit: -1}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: half
  namespace: ml
  labels: {tessera.dev/queue: team}
  annotations: {gpu-fraction: "0.5", tessera.dev/sim-duration: 10m}
spec:
  schedulerName: tessera
  containers: [{name: c, image: x, resources: {requests: {cpu: "1", memory: 1Gi}}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: broken
  namespace: ml
  annotations: {gpu-fraction: "nan"}
spec:
  schedulerName: tessera
  containers: [{name: c, image: x}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ignored}
"""


def test_builtin_demo_json():
    result = runner.invoke(app, ["simulate", "--until", "10m", "-o", "json"])
    assert result.exit_code == 0, result.output
    s = json.loads(result.stdout)
    assert s["policy"] == DEFAULT_POLICY == "wastefit"  # the best on the published traces is the default
    assert s["gpus"]["capacity"] == 352
    assert 0 < s["gpus"]["allocated"] <= 352 and s["gpus"]["allocated_pct"] > 20
    assert {q["name"] for q in s["queues"]} >= {
        "inference",
        "vision",
        "nlp",
        "research",
        "production",
        "default",
    }
    for q in s["queues"]:
        assert set(q["allocated"]) == {"gpu", "cpu", "memory"} and set(q["fairShare"]) == {
            "gpu",
            "cpu",
            "memory",
        }
    running = [p for p in s["pods"] if p["phase"] == "Running"]
    assert running and all(p["node"] for p in running)
    assert any(0 < g["milli"] < 1000 for p in running for g in p["gpus"])
    reasons = {p["name"]: p["reason"] for p in s["pods"] if p["phase"] == "Pending"}
    assert "strictly between 0 and 1" in reasons["bad-fraction"]
    assert "queue ghost does not exist" in reasons["lost-queue"]
    assert "model not in NVIDIA-A100-SXM4-80GB" in reasons["wants-a100"]
    scheduled = [e for e in s["events"] if e["type"] == "Scheduled"]
    assert scheduled and all(e["action"] == "allocate" for e in scheduled)
    assert {"time_s", "type", "action", "pod"} <= set(scheduled[0])


def test_builtin_demo_table_is_readable():
    result = runner.invoke(app, ["simulate", "--until", "5m"])
    assert result.exit_code == 0, result.output
    assert "GPUs allocated" in result.output and "Queues (GPUs)" in result.output
    assert "(placement wastefit)" in result.output


def test_user_manifests(tmp_path):
    f = tmp_path / "cluster.yaml"
    f.write_text(MANIFESTS)
    result = runner.invoke(app, ["simulate", "-f", str(f), "-o", "json"])
    assert result.exit_code == 0, result.output
    s = json.loads(result.stdout)
    pods = {p["name"]: p for p in s["pods"]}
    assert pods["half"]["gpus"] == [{"index": 0, "milli": 500}]
    assert pods["broken"]["phase"] == "Pending" and "finite" in pods["broken"]["reason"]
    assert any("Deployment is not simulated" in w for w in s["warnings"])
    assert s["sim_time_s"] == pytest.approx(601, abs=1)  # ran until the last pod finished


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("kind: [unclosed", "not valid YAML"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", "no Node objects"),
    ],
)
def test_bad_manifests_fail_with_one_line(tmp_path, content, message):
    f = tmp_path / "bad.yaml"
    f.write_text(content)
    result = runner.invoke(app, ["simulate", "-f", str(f)])
    assert result.exit_code == 2
    assert message in result.output


def test_missing_file_and_bad_options():
    assert "cannot read" in runner.invoke(app, ["simulate", "-f", "/nonexistent.yaml"]).output
    r = runner.invoke(app, ["simulate", "--policy", "nope"])
    assert r.exit_code == 2 and "--policy: 'nope' is not one of" in r.output
    r = runner.invoke(app, ["simulate", "--until", "soon"])
    assert r.exit_code == 2 and "not a duration" in r.output


@pytest.mark.parametrize(
    ("raw", "seconds"), [("30s", 30), ("10m", 600), ("1h30m", 5400), ("1.5h", 5400), ("45", 45), (7, 7)]
)
def test_durations(raw, seconds):
    assert parse_duration(raw) == seconds


@pytest.mark.parametrize("raw", ["", "abc", "10x", "-5", "nan", "5m3"])
def test_bad_durations(raw):
    with pytest.raises(ValueError):
        parse_duration(raw)
