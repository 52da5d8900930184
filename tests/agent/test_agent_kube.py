"""The agent against the real API server, as the node's ServiceAccount (the chart's agent ClusterRole),
through the real kubernetes client; the fault proxy plays the API outages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from typer.testing import CliRunner

from node_agent.agent import Agent
from node_agent.cgroup import CgroupResolver
from node_agent.enforcer import Watchdog
from node_agent.events import KubeEvents
from node_agent.pods import KubePods, PodInfo
from node_agent.publisher import PLURAL, ReportPublisher
from scheduler.api import GPUNodeReport
from scheduler.api.keys import GROUP, VERSION
from scheduler.sandbox.controlplane import ControlPlane
from tests.controlplane.faultproxy import FaultProxy
from tests.controlplane.install import TesseraInstall
from tests.controlplane.scene import Scene as ApiScene
from tests.controlplane.scene import wait_until

from .conftest import NODE, Scene
from .test_agent_nodes_cli import cli

pytestmark = pytest.mark.apiserver


@pytest.fixture
def api(control_plane: ControlPlane, tessera: TesseraInstall, namespace: str) -> Iterator[ApiScene]:
    """The test's namespace on the real API server (the agent's own `scene` fixture is its fake node)."""
    world = ApiScene(control_plane, tessera, namespace)
    world.track("gpunodereports", NODE)
    try:
        yield world
    finally:
        world.cleanup()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=self.now)


def find_report(api: ApiScene, name: str = NODE) -> dict[str, Any] | None:
    try:
        return dict(api.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name))
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


class Writes:
    """Counts writes of the node's report by its resourceVersion (the server's state, not a request log)."""

    def __init__(self, api: ApiScene) -> None:
        self.api = api
        self.seen: str | None = None
        self.count = 0

    def __call__(self) -> int:
        obj = find_report(self.api)
        version = obj["metadata"]["resourceVersion"] if obj else None
        if version != self.seen:
            self.seen = version
            self.count += 1
        return self.count


def create_pod(api: ApiScene, scene: Scene, name: str, gpus: list[tuple[int, int, int]] | None = None,
               *, node: str = NODE) -> PodInfo:  # fmt: skip
    """A pod on `node` as its kubelet reports it (running, with its container ID), created on the server;
    the fake node's cgroup files then name the UID the server gave it."""
    body = scene.pod_dict(name, gpus, namespace=api.ns)
    body["metadata"].pop("uid")
    body.pop("status")
    body["spec"] = {"nodeName": node, "containers": [{"name": "main", "image": "cuda"}]}
    uid = str(api.create_pod({"apiVersion": "v1", "kind": "Pod", **body})["metadata"]["uid"])
    as_kubelet = scene.pod_dict(name, gpus, namespace=api.ns, uid=uid)["status"]
    for status in as_kubelet["containerStatuses"]:
        status.update(image="cuda", imageID="", ready=True, restartCount=0, state={"running": {}})
    api.core.patch_namespaced_pod_status(name, api.ns, {"status": {"phase": "Running", **as_kubelet}})
    return scene.add_pod(name, gpus, namespace=api.ns, uid=uid)


def kube_agent(agent_api: client.ApiClient, scene: Scene, clock: Clock, mode: str = "report") -> Agent:
    """The agent with the node's ServiceAccount (the chart's agent ClusterRole)."""
    core = client.CoreV1Api(agent_api)
    return Agent(
        NODE,
        scene.nvml,
        events=KubeEvents(core, NODE),
        pods=KubePods(core, NODE, clock=clock),
        resolver=CgroupResolver(scene.proc_root),
        watchdog=Watchdog(mode, events=KubeEvents(core, NODE), kill=lambda pid, sig: None),  # type: ignore[arg-type]
        publisher=ReportPublisher(
            client.CustomObjectsApi(agent_api), heartbeat_s=30, min_interval_s=2, clock=clock
        ),
        clock=clock,
        wall_clock=clock.wall,
    )


def test_report_published_only_on_change_or_heartbeat(api: ApiScene, scene: Scene) -> None:
    clock = Clock()
    create_pod(api, scene, "train", [(0, 500, 0)])
    agent = kube_agent(api.tessera.agent_client(), scene, clock)
    writes = Writes(api)
    agent.tick()
    assert writes() == 1
    stored = GPUNodeReport.model_validate(find_report(api))
    assert stored.spec.node == NODE and [g.assigned_milli for g in stored.spec.gpus] == [500, 0]

    clock.now += 5
    scene.nvml.set_utilization(0, 2)  # noise inside the band
    agent.tick()
    assert writes() == 1

    clock.now += 5
    scene.nvml.add_process(1, 999, 2048)  # a new process: a real change
    agent.tick()
    assert writes() == 2
    stored = GPUNodeReport.model_validate(find_report(api))
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


def test_publisher_survives_conflicts_deletion_and_outages(
    api: ApiScene, scene: Scene, fault_proxy: FaultProxy
) -> None:
    clock = Clock()
    agent = kube_agent(fault_proxy.client(api.tessera.agent_token), scene, clock)
    agent.tick()
    # Someone else wrote the object: our resourceVersion is stale (409), the agent re-reads and wins.
    api.custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, NODE, {"metadata": {"labels": {"x": "y"}}})
    clock.now += 60
    agent.tick()
    assert not find_report(api)["metadata"].get("labels")  # type: ignore[index]  # our replace won
    assert [r.status for r in fault_proxy.requests_matching("PUT", f"/{PLURAL}/{NODE}$")][-2:] == [409, 200]
    # Deleted under our feet: recreated.
    api.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, NODE)
    clock.now += 60
    agent.tick()
    assert find_report(api) is not None
    assert [r.status for r in fault_proxy.requests_matching(path_regex=f"/{PLURAL}")][-3:] == [404, 404, 201]
    # API down: the round goes on, the write is retried next round.
    fault_proxy.fail("*", f"/{PLURAL}", 503)
    clock.now += 60
    scene.nvml.inject_xid(0, 79)
    report = agent.tick()
    assert report.spec.gpus[0].health == "Unhealthy"
    assert GPUNodeReport.model_validate(find_report(api)).spec.gpus[0].health == "Healthy"
    clock.now += 3
    agent.tick()
    assert GPUNodeReport.model_validate(find_report(api)).spec.gpus[0].health == "Unhealthy"


def test_pods_from_the_api_and_event_on_over_limit(api: ApiScene, scene: Scene) -> None:
    clock = Clock()
    hog_info = create_pod(api, scene, "hog", [(0, 250, 0)])
    fine_info = create_pod(api, scene, "fine", [(0, 250, 0)])
    create_pod(api, scene, "elsewhere", [(0, 250, 0)], node="gpu-node-2")  # assigned here, bound elsewhere
    scene.run_process(hog_info, 0, 700, 12000)
    scene.run_process(fine_info, 0, 701, 1000)
    agent = kube_agent(api.tessera.agent_client(), scene, clock)
    report = agent.tick()
    # Only this node's pods were listed (field selector), with their containers and assignments.
    assert {s.pod for s in report.spec.gpus[0].shares} == {"hog", "fine"}
    assert {p.pod: p.container for p in report.spec.gpus[0].processes} == {"hog": "main", "fine": "main"}
    events = api.events_for("hog", kind="Pod")
    assert [e["reason"] for e in events] == ["GPUMemoryOverLimit"]
    assert events[0]["type"] == "Warning" and "12000 MiB" in events[0]["message"]
    assert events[0]["involvedObject"]["uid"] == hog_info.uid
    assert api.events_for("fine") == []


def test_new_pod_triggers_a_prompt_relist(api: ApiScene, scene: Scene) -> None:
    clock = Clock()
    agent = kube_agent(api.tessera.agent_client(), scene, clock)
    agent.tick()
    late = create_pod(api, scene, "late", [(1, 500, 0)])
    scene.run_process(late, 1, 800, 100)
    clock.now += 0.5
    agent.tick()  # unknown pod UID seen: refresh requested, but rate-limited
    clock.now += 1
    report = agent.tick()
    assert report.spec.gpus[1].processes[0].pod == "late"


def test_agent_process_publishes_to_the_cluster(api: ApiScene, tmp_path: Path) -> None:
    api.track("gpunodereports", "n7")
    cmd = [
        sys.executable,
        "-m",
        "node_agent",
        "--fake-gpus",
        "2xA100-40GB",
        "--node-name",
        "n7",
        "--kubeconfig",
        str(api.tessera.agent_kubeconfig),
        "--interval",
        "0.2",
        "--proc-root",
        str(tmp_path),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stored = wait_until(lambda: find_report(api, "n7"), timeout=30)
        assert [g["model"] for g in stored["spec"]["gpus"]] == ["NVIDIA A100-40GB"] * 2
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err


def test_nodes_command_reads_the_cluster(api: ApiScene, scene: Scene) -> None:
    report = scene.agent().tick()
    api.custom.create_cluster_custom_object(
        GROUP, VERSION, PLURAL, report.model_dump(by_alias=True, mode="json", exclude_none=True)
    )
    result = CliRunner().invoke(cli(), ["nodes", "--kubeconfig", str(api.cp.admin_kubeconfig)])
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


def test_unhealthy_gpu_is_an_event_on_the_node(api: ApiScene, scene: Scene) -> None:
    agent = kube_agent(api.tessera.agent_client(), scene, Clock())
    agent.tick()
    scene.nvml.inject_xid(1, 79)
    agent.tick()
    agent.tick()
    events = [e for e in api.events_for(NODE, kind="Node", namespace="default") if "GPU 1" in e["message"]]
    assert [(e["reason"], e["type"]) for e in events] == [("GPUUnhealthy", "Warning")]
    assert "Xid 79" in events[0]["message"]
    assert "namespace" not in events[0]["involvedObject"]
    api.core.delete_namespaced_event(events[0]["metadata"]["name"], "default")


def test_pod_list_outage_keeps_the_last_view(api: ApiScene, scene: Scene, fault_proxy: FaultProxy) -> None:
    clock = Clock()
    create_pod(api, scene, "train", [(0, 500, 0)])
    core = client.CoreV1Api(fault_proxy.client(api.tessera.agent_token))
    pods = KubePods(core, NODE, period_s=10, clock=clock)
    assert [p.name for p in pods.pods().values()] == ["train"]
    api.core.delete_namespaced_pod("train", api.ns, body=client.V1DeleteOptions(grace_period_seconds=0))
    fault_proxy.fail("GET", "^/api/v1/pods$", 500)
    clock.now += 10
    assert [p.name for p in pods.pods().values()] == ["train"]  # listing failed: last good view
    clock.now += 10
    assert pods.pods() == {}
