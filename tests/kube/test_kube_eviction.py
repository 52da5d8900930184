"""Reclaim cannot be blocked by a tenant (issue 27, findings 3 and 7), on the real kube-apiserver: victims meet
real PodDisruptionBudgets (the disruption controller runs in the controller-manager), the tenant is a
ServiceAccount with the built-in `edit` role, and the kubelet stand-in stops a deleted pod only at the end
of its deletion's grace period, as a real kubelet kills containers that do not stop.

- a budget with `maxUnavailable: 0` over the borrowed GPUs: the victims are deleted anyway (the default,
  KAI's behaviour), with an Event saying so; `--disruption-budgets respect` is
  tests/kube/test_kube_e2e.py's `test_a_disruption_budget_keeps_the_victim_and_the_beneficiary_waits`;
- a victim asking for `terminationGracePeriodSeconds: 1000000` is deleted with `--max-victim-grace`;
- pods a tenant deletes (with a grace period) still count toward their queue's limit until they are gone.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client

from scheduler.cycle import SchedulerConfig
from scheduler.framework.eviction import EvictionPolicy
from tests.controlplane.scene import Scene, runner_config, wait_until
from tests.kube.helpers import pod_body

pytestmark = pytest.mark.apiserver


def whole(scene: Scene, name: str, queue: str, **spec: Any) -> dict[str, Any]:
    body = pod_body(name, labels={"tessera.dev/queue": queue, "app": queue}, limits={"nvidia.com/gpu": "1"},
                    namespace=scene.ns)  # fmt: skip
    body["spec"].update(priorityClassName="train", **spec)
    return body


def queues(scene: Scene) -> None:
    """a borrows (quota 0), b comes back for its quota of 2."""
    scene.queue("a", {"resources": {"gpu": {"quota": 0, "limit": -1}}})
    scene.queue("b", {"resources": {"gpu": {"quota": 2, "limit": -1}}})


def test_a_budget_allowing_no_disruption_does_not_block_reclaim(scene: Scene) -> None:
    scene.node("gpu-1", gpus=2)
    queues(scene)
    api, _ = scene.tenant()
    pods = client.CoreV1Api(api)
    kubelet = scene.kubelet()
    scene.scheduler()
    for i in range(2):
        pods.create_namespaced_pod(scene.ns, whole(scene, f"a{i}", "a"))
    wait_until(lambda: len(kubelet.allocated) == 2, timeout=20)
    client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(scene.ns, {  # the tenant's own budget
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "never"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "a"}}}})  # fmt: skip
    wait_until(lambda: scene.pdb_allows("never") == 0)
    for i in range(2):
        pods.create_namespaced_pod(scene.ns, whole(scene, f"b{i}", "b"))
    wait_until(lambda: {"b0", "b1"} <= set(scene.bound()), timeout=30)
    assert scene.find_pod("a0") is None and scene.find_pod("a1") is None
    reasons = {e["reason"]: e["message"] for e in scene.events_for("a0")}
    assert "DisruptionBudgetOverridden" in reasons and "never" in reasons["DisruptionBudgetOverridden"]
    assert "Reclaimed" in reasons


def test_a_victims_grace_period_is_capped(scene: Scene) -> None:
    scene.node("gpu-1", gpus=1)
    queues(scene)
    scene.kubelet(grace_s=None)  # a pod stops at the end of its deletion's grace period
    config = runner_config()
    config = replace(config, scheduler=replace(config.scheduler, eviction=EvictionPolicy(max_grace_s=3)))
    scene.scheduler(config)
    scene.create_pod(whole(scene, "slow", "a", terminationGracePeriodSeconds=1_000_000))
    wait_until(lambda: "slow" in scene.bound(), timeout=20)
    start = time.monotonic()
    scene.create_pod(whole(scene, "b0", "b"))
    wait_until(
        lambda: (scene.find_pod("slow") or {}).get("metadata", {}).get("deletionTimestamp"), timeout=15
    )
    assert scene.pod("slow")["metadata"]["deletionGracePeriodSeconds"] == 3
    wait_until(lambda: "b0" in scene.bound(), timeout=20)  # 3 s, not 11.6 days
    assert time.monotonic() - start < 20


def test_pods_being_deleted_count_toward_their_queues_limit(scene: Scene) -> None:
    # The old pods run on gpu-old; the new ones ask for gpu-new, where nothing they could wait for runs.
    scene.node("gpu-old", gpus=2, labels={"pool": "old"})
    scene.node("gpu-new", gpus=2, labels={"pool": "new"})
    scene.queue("a", {"resources": {"gpu": {"quota": 2, "limit": 2}}})
    api, _ = scene.tenant()
    pods = client.CoreV1Api(api)
    kubelet = scene.kubelet(grace_s=None)
    scene.scheduler(runner_config(scheduler=SchedulerConfig(expected_nodes=4, max_gpus_per_node=8)))
    for i in range(2):
        pods.create_namespaced_pod(scene.ns, whole(scene, f"old{i}", "a", nodeSelector={"pool": "old"}))
    wait_until(lambda: len(kubelet.allocated) == 2, timeout=20)
    for i in range(2):  # the tenant deletes its pods (8 s to stop) and submits new ones at once
        pods.delete_namespaced_pod(f"old{i}", scene.ns, grace_period_seconds=8)
        pods.create_namespaced_pod(scene.ns, whole(scene, f"new{i}", "a", nodeSelector={"pool": "new"}))

    def new_ones_run() -> bool:
        bound = scene.bound()
        assert len(bound) <= 2, f"queue a runs {sorted(bound)}, over its limit of 2"  # terminating included
        return {"new0", "new1"} <= set(bound)

    wait_until(new_ones_run, timeout=40, interval=0.2)
    reasons = [c.get("message", "") for p in ("new0", "new1") for e in [scene.events_for(p)] for c in e]
    assert any("old" in m for m in reasons), reasons  # they waited, told for whom
