"""An elastic gang on the real kube-apiserver: a PodGroup whose minMember is below its pod count runs
with what fits (at least minMember), its PodGroup says Running, the members still waiting say why on
their PodScheduled condition, and it grows when capacity comes."""

from __future__ import annotations

import pytest

from tests.controlplane.scene import Scene, wait_until
from tests.kube.helpers import pod_body
from tests.kube.test_kube_e2e import phase_of

pytestmark = pytest.mark.apiserver


def test_an_elastic_gang_runs_its_minimum_and_grows(scene: Scene) -> None:
    scene.node("gpu-1", gpus=2)
    scene.kubelet()
    scene.podgroup("el", {"minMember": 2})
    runner = scene.scheduler()
    for i in range(4):
        scene.create_pod(pod_body(f"el-{i}", annotations={"tessera.dev/pod-group": "el"},
                                  limits={"nvidia.com/gpu": "1"}))  # fmt: skip
    wait_until(lambda: len(scene.bound()) == 2)
    wait_until(lambda: phase_of(scene, "el") == "Running")
    assert scene.get("podgroups", "el")["status"]["running"] == 2
    cycles = runner.cycles
    wait_until(lambda: runner.cycles >= cycles + 3)
    assert len(scene.bound()) == 2  # no more room: the other two wait, the gang is not torn down
    waiting = [p for p in scene.pods() if not p["spec"].get("nodeName")]
    assert len(waiting) == 2
    for pod in waiting:
        cond = {c["type"]: c for c in pod["status"].get("conditions") or []}["PodScheduled"]
        assert cond["status"] == "False" and "runs its minMember (2)" in cond["message"], cond
    scene.node("gpu-2", gpus=2)
    wait_until(lambda: len(scene.bound()) == 4)
    wait_until(lambda: scene.get("podgroups", "el")["status"]["running"] == 4)
    assert sum(scene.gpu_use().values()) == 4000
