"""Minimum runtimes on the real kube-apiserver: the Queue CRD takes KAI's duration fields and refuses what
the model refuses; a job younger than its queue's preemptMinRuntime is not preempted, and the waiting pod's
PodScheduled condition says when the first victim becomes eligible (age from the kubelet's startTime)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client
from pydantic import ValidationError

from scheduler.api.keys import GROUP, VERSION
from scheduler.api.queue import Queue
from tests.controlplane.scene import Scene, wait_until
from tests.kube.test_kube_e2e import team_pod

pytestmark = pytest.mark.apiserver

FIELDS: list[tuple[dict[str, Any], bool]] = [
    ({"preemptMinRuntime": "10m", "reclaimMinRuntime": "1h30m"}, True),
    ({"reclaimMinRuntime": "0"}, True),
    ({"preemptMinRuntime": "90s"}, True),
    ({"preemptMinRuntime": "10"}, False),  # no unit
    ({"reclaimMinRuntime": "-5s"}, False),  # KAI's server takes it (and it then protects nothing)
    ({"reclaimMinRuntime": "2d"}, False),  # metav1.Duration has no days
    ({"preemptMinRuntime": "soon"}, False),
]


@pytest.mark.parametrize(("fields", "valid"), FIELDS, ids=[str(f) for f, _ in FIELDS])
def test_the_queue_crd_and_the_model_agree_on_min_runtimes(
    scene: Scene, fields: dict[str, Any], valid: bool
) -> None:
    name = f"minrt-{uuid.uuid4().hex[:8]}"
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Queue", "metadata": {"name": name}, "spec": fields}
    try:
        model: Queue | None = Queue.model_validate(body)
    except ValidationError:
        model = None
    assert (model is not None) == valid
    try:
        scene.queue(name, fields)
    except client.ApiException as exc:
        assert not valid, exc.body
        assert exc.status == 422
        return
    assert valid, "the API server took what the model refuses"
    stored = Queue.model_validate(scene.get("queues", name, namespaced=False))
    assert model is not None and stored.spec == model.spec


def test_a_young_victim_is_not_preempted_and_the_pod_says_when(scene: Scene) -> None:
    scene.node("gpu-1", gpus=1)
    unlimited = {"quota": -1, "limit": -1}
    scene.queue("team", {"preemptMinRuntime": "1h",
                         "resources": {"gpu": {"quota": 1, "limit": -1}, "cpu": unlimited, "memory": unlimited}})  # fmt: skip
    kubelet = scene.kubelet()
    runner = scene.scheduler()
    scene.create_pod(team_pod("train-0", "0.75", "train"))
    wait_until(lambda: f"{scene.ns}/train-0" in kubelet.allocated)
    wait_until(lambda: scene.pod("train-0")["status"].get("startTime"))  # the kubelet's
    scene.create_pod(team_pod("urgent", "0.5", "inference"))

    def reason() -> dict[str, Any] | None:
        conditions = {c["type"]: c for c in scene.pod("urgent")["status"].get("conditions") or []}
        return conditions.get("PodScheduled")

    # Kubernetes' reason for a pod the scheduler cannot place is Unschedulable; Tessera's code leads the message.
    wait_until(lambda: (reason() or {}).get("message", "").startswith("WaitingForMinRuntime: "), timeout=15)
    message = (reason() or {})["message"]
    assert "preempt waits for minimum runtime: first victim eligible in " in message, message
    assert f"{scene.ns}/train-0 of queue team" in message and "preemptMinRuntime 1h" in message
    cycles = runner.cycles
    wait_until(lambda: runner.cycles >= cycles + 5)
    assert "train-0" in scene.bound() and "urgent" not in scene.bound()
    assert not scene.pod("train-0")["metadata"].get("deletionTimestamp")
