"""What the chart and the install guide create is usable: the pods they describe get scheduled.

The install guide's objects and the chart's `default` queue run through the real scheduling loop on the
simulated cluster (examples/simulate/cluster.yaml), which parses them exactly as the Kubernetes adapter
does."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scheduler.api import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT
from scheduler.api.queue import Queue
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.placement.registry import policy_names
from scheduler.sim.cluster import SimCluster
from scheduler.sim.loader import Manifests, load_files
from scheduler.sim.runner import run_simulation
from tests.deploy.deploy_support import Manifest, one

ROOT = Path(__file__).resolve().parents[2]
NODES = ROOT / "examples" / "simulate" / "cluster.yaml"


def simulate(manifests: Manifests, until_s: float = 30) -> SimCluster:
    sim = SimCluster.from_manifests(manifests)
    run_simulation(sim, Scheduler(sim, SchedulerConfig()), until_s=until_s, period_s=1.0)
    return sim


def phase(sim: SimCluster, key: str) -> str:
    return str(sim.pods[key].obj["status"]["phase"])


def test_install_guide_examples_schedule() -> None:
    sim = simulate(load_files([NODES, ROOT / "examples" / "install"]))
    half = sim.pods["default/half-gpu"].obj
    assert phase(sim, "default/half-gpu") == "Running", sim.pods["default/half-gpu"].reason
    gpus = GPUAssignment.from_annotation(half["metadata"]["annotations"][GPU_ASSIGNMENT]).gpus
    assert [g.milli for g in gpus] == [500]
    workers = [k for k in sim.pods if k.startswith("default/resnet-ddp-")]
    assert len(workers) == 4 and all(phase(sim, k) == "Running" for k in workers)


def unlabelled_pod(name: str, priority_class: str, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {"gpu-fraction": "0.5", **annotations},
        },
        "spec": {
            "schedulerName": "tessera",
            "priorityClassName": priority_class,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "memory": "8Gi"}}}],
        },
    }


def test_the_charts_default_queue_lends_idle_gpus_to_preemptible_pods_only(
    default_objects: list[Manifest],
) -> None:
    """Its quota is 0 (issue 27: an unlimited `default` is work nothing ever reclaims): a preemptible pod
    without a queue label borrows idle GPUs there; a non-preemptible one is told to use a team queue."""
    default_queue = one(default_objects, "Queue")
    assert Queue.model_validate(default_queue).spec.resources.gpu.quota == 0
    manifests = load_files([NODES])
    manifests.objects["Queue"].append(copy.deepcopy(default_queue))
    manifests.objects["Pod"] += [unlabelled_pod("notebook", "train"), unlabelled_pod("chat", "inference")]
    sim = simulate(manifests)
    assert phase(sim, "default/notebook") == "Running", sim.pods["default/notebook"].reason
    assert phase(sim, "default/chat") == "Pending"
    reason, message = sim.pods["default/chat"].reason or ("", "")
    assert reason == "OverQuota" and "queue default has 0 of 0 gpu quota" in message, message


def test_the_values_schema_lists_every_registered_policy(render: Callable[..., list[Manifest]]) -> None:
    schema = (ROOT / "deploy" / "helm" / "tessera" / "values.schema.json").read_text()
    for name in policy_names():
        assert f'"{name}"' in schema
        args = one(render({"scheduler": {"placement": name}}), "Deployment")["spec"]["template"]["spec"]
        assert f"--placement={name}" in args["containers"][0]["args"]


@pytest.mark.parametrize("script", ["gen_values_schema.py"])
def test_the_values_schema_is_generated(script: str) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
