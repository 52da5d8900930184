"""The agent against a local API server, through the real kubernetes client (fixture `kube_api`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from typer.testing import CliRunner

from node_agent.agent import Agent
from node_agent.cgroup import CgroupResolver
from node_agent.enforcer import Watchdog
from node_agent.events import KubeEvents
from node_agent.pods import KubePods
from node_agent.publisher import PLURAL, ReportPublisher
from scheduler.api import GPUNodeReport
from scheduler.api.keys import GROUP

from .conftest import NODE, Scene
from .test_agent_nodes_cli import cli

FakeKubeAPI = Any  # tests.fakes.kubeapi.FakeKubeAPI


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=self.now)


class Writes:
    """Counts writes of the node's report by its resourceVersion (the server's state, not its request log)."""

    def __init__(self, kube_api: FakeKubeAPI) -> None:
        self.kube_api = kube_api
        self.seen: str | None = None
        self.count = 0

    def __call__(self) -> int:
        obj = self.kube_api.find(PLURAL, NODE, group=GROUP)
        version = obj["metadata"]["resourceVersion"] if obj else None
        if version != self.seen:
            self.seen = version
            self.count += 1
        return self.count


def seed_pods(kube_api: FakeKubeAPI, scene: Scene, *pods: dict[str, Any]) -> None:
    for namespace in {p["metadata"]["namespace"] for p in pods}:
        kube_api.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for pod in pods:
        kube_api.seed({"apiVersion": "v1", "kind": "Pod", **pod})


def kube_agent(kube_api: FakeKubeAPI, scene: Scene, clock: Clock, mode: str = "report") -> Agent:
    api = kube_api.client()
    core = client.CoreV1Api(api)
    return Agent(
        NODE,
        scene.nvml,
        events=KubeEvents(core, NODE),
        pods=KubePods(core, NODE, clock=clock),
        resolver=CgroupResolver(scene.proc_root),
        watchdog=Watchdog(mode, events=KubeEvents(core, NODE), kill=lambda pid, sig: None),  # type: ignore[arg-type]
        publisher=ReportPublisher(
            client.CustomObjectsApi(api), heartbeat_s=30, min_interval_s=2, clock=clock
        ),
        clock=clock,
        wall_clock=clock.wall,
    )


def test_report_published_only_on_change_or_heartbeat(kube_api: FakeKubeAPI, scene: Scene) -> None:
    clock = Clock()
    pod = scene.pod_dict("train", [(0, 500, 0)])
    seed_pods(kube_api, scene, pod)
    agent = kube_agent(kube_api, scene, clock)
    writes = Writes(kube_api)
    agent.tick()
    assert writes() == 1
    stored = GPUNodeReport.model_validate(kube_api.get(PLURAL, NODE, group=GROUP))
    assert stored.spec.node == NODE and [g.assigned_milli for g in stored.spec.gpus] == [500, 0]

    clock.now += 5
    scene.nvml.set_utilization(0, 2)  # noise inside the band
    agent.tick()
    assert writes() == 1

    clock.now += 5
    scene.nvml.add_process(1, 999, 2048)  # a new process: a real change
    agent.tick()
    assert writes() == 2
    stored = GPUNodeReport.model_validate(kube_api.get(PLURAL, NODE, group=GROUP))
    assert [p.pid for p in stored.spec.gpus[1].processes] == [999]

    clock.now += 1  # changed again, but within min_interval: wait
    scene.nvml.remove_process(999)
    agent.tick()
    assert writes() == 2
    clock.now += 2
    agent.tick()
    assert writes() == 3

    clock.now += 31  # nothing changed, heartbeat due
    agent.tick()
    assert writes() == 4


def test_publisher_survives_conflicts_deletion_and_outages(kube_api: FakeKubeAPI, scene: Scene) -> None:
    clock = Clock()
    agent = kube_agent(kube_api, scene, clock)
    agent.tick()
    # Someone else wrote the object: our resourceVersion is stale (409), the agent re-reads and wins.
    kube_api.modify(PLURAL, NODE, lambda o: o["metadata"].setdefault("labels", {}).update(x="y"), group=GROUP)
    clock.now += 60
    agent.tick()
    assert kube_api.get(PLURAL, NODE, group=GROUP)["metadata"]["labels"] == {}  # our replace won
    # Deleted under our feet: recreated.
    kube_api.remove(PLURAL, NODE, group=GROUP)
    clock.now += 60
    agent.tick()
    assert kube_api.find(PLURAL, NODE, group=GROUP) is not None
    # API down: the round goes on, the write is retried next round.
    kube_api.fail_next("*", f"/{PLURAL}", code=503)
    clock.now += 60
    scene.nvml.inject_xid(0, 79)
    report = agent.tick()
    assert report.spec.gpus[0].health == "Unhealthy"
    assert (
        GPUNodeReport.model_validate(kube_api.get(PLURAL, NODE, group=GROUP)).spec.gpus[0].health == "Healthy"
    )
    clock.now += 3
    agent.tick()
    stored = GPUNodeReport.model_validate(kube_api.get(PLURAL, NODE, group=GROUP))
    assert stored.spec.gpus[0].health == "Unhealthy"


def test_pods_from_the_api_and_event_on_over_limit(kube_api: FakeKubeAPI, scene: Scene) -> None:
    clock = Clock()
    hog = scene.pod_dict("hog", [(0, 250, 0)])
    fine = scene.pod_dict("fine", [(0, 250, 0)])
    elsewhere = scene.pod_dict("elsewhere", [(0, 250, 0)])  # assigned here but bound elsewhere
    elsewhere["spec"]["nodeName"] = "gpu-node-2"
    seed_pods(kube_api, scene, hog, fine, elsewhere)
    hog_info = scene.add_pod("hog", [(0, 250, 0)])
    fine_info = scene.add_pod("fine", [(0, 250, 0)])
    scene.run_process(hog_info, 0, 700, 12000)
    scene.run_process(fine_info, 0, 701, 1000)
    agent = kube_agent(kube_api, scene, clock)
    report = agent.tick()
    # Only this node's pods were listed (field selector), with their containers and assignments.
    assert {s.pod for s in report.spec.gpus[0].shares} == {"hog", "fine"}
    assert {p.pod: p.container for p in report.spec.gpus[0].processes} == {"hog": "main", "fine": "main"}
    events = kube_api.events_for("hog", "team-a", kind="Pod")
    assert [e["reason"] for e in events] == ["GPUMemoryOverLimit"]
    assert events[0]["type"] == "Warning" and "12000 MiB" in events[0]["message"]
    assert events[0]["involvedObject"]["uid"] == hog_info.uid
    assert kube_api.events_for("fine", "team-a") == []


def test_new_pod_triggers_a_prompt_relist(kube_api: FakeKubeAPI, scene: Scene) -> None:
    clock = Clock()
    agent = kube_agent(kube_api, scene, clock)
    agent.tick()
    late = scene.add_pod("late", [(1, 500, 0)])
    scene.run_process(late, 1, 800, 100)
    seed_pods(kube_api, scene, scene.pod_dict("late", [(1, 500, 0)]))
    clock.now += 0.5
    agent.tick()  # unknown pod UID seen: refresh requested, but rate-limited
    clock.now += 1
    report = agent.tick()
    assert report.spec.gpus[1].processes[0].pod == "late"


def kubeconfig(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": url}}],
                "users": [{"name": "test", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "test"}}],
                "current-context": "fake",
            }
        )
    )
    return path


def test_agent_process_publishes_to_the_cluster(kube_api: FakeKubeAPI, tmp_path: Path) -> None:
    config = kubeconfig(tmp_path, kube_api.url)
    cmd = [
        sys.executable,
        "-m",
        "node_agent",
        "--fake-gpus",
        "2xA100-40GB",
        "--node-name",
        "n7",
        "--kubeconfig",
        str(config),
        "--interval",
        "0.2",
        "--proc-root",
        str(tmp_path),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and kube_api.find(PLURAL, "n7", group=GROUP) is None:
            time.sleep(0.1)
        stored = kube_api.find(PLURAL, "n7", group=GROUP)
        assert stored is not None
        assert [g["model"] for g in stored["spec"]["gpus"]] == ["NVIDIA A100-40GB"] * 2
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err


def test_nodes_command_reads_the_cluster(kube_api: FakeKubeAPI, scene: Scene, tmp_path: Path) -> None:
    report = scene.agent().tick()
    kube_api.seed(report.model_dump(by_alias=True, mode="json", exclude_none=True))
    result = CliRunner().invoke(cli(), ["nodes", "--kubeconfig", str(kubeconfig(tmp_path, kube_api.url))])
    assert result.exit_code == 0, result.output
    assert [line.split()[:2] for line in result.stdout.strip().splitlines()[1:]] == [[NODE, "0"], [NODE, "1"]]


def test_nodes_command_without_a_cluster_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli(), ["nodes", "--kubeconfig", str(tmp_path / "missing")])
    assert result.exit_code == 2  # the user has to point us at a cluster
    assert result.stderr.startswith("error: no usable kubeconfig:")
    assert result.stderr.count("\n") == 1


@pytest.fixture(autouse=True)
def _quiet_events(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("ERROR")


def test_unhealthy_gpu_is_an_event_on_the_node(kube_api: FakeKubeAPI, scene: Scene) -> None:
    agent = kube_agent(kube_api, scene, Clock())
    agent.tick()
    scene.nvml.inject_xid(1, 79)
    agent.tick()
    agent.tick()
    events = kube_api.events_for(NODE, "default", kind="Node")
    assert [(e["reason"], e["type"]) for e in events] == [("GPUUnhealthy", "Warning")]
    assert "GPU 1" in events[0]["message"] and "Xid 79" in events[0]["message"]
    assert "namespace" not in events[0]["involvedObject"]


def test_pod_list_outage_keeps_the_last_view(kube_api: FakeKubeAPI, scene: Scene) -> None:
    clock = Clock()
    seed_pods(kube_api, scene, scene.pod_dict("train", [(0, 500, 0)]))
    pods = KubePods(client.CoreV1Api(kube_api.client()), NODE, period_s=10, clock=clock)
    assert [p.name for p in pods.pods().values()] == ["train"]
    kube_api.remove("pods", "train", "team-a")
    kube_api.fail_next("GET", "^/api/v1/pods$", code=500)
    clock.now += 10
    assert [p.name for p in pods.pods().values()] == ["train"]  # listing failed: last good view
    clock.now += 10
    assert pods.pods() == {}
