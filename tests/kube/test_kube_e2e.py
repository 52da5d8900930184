"""End to end on the real kube-apiserver: the real scheduling cycle through the Kubernetes adapter, as the
scheduler's ServiceAccount (the chart's RBAC), with a kubelet stand-in that allocates bound pods as the
device plugin does and starts them. Evictions meet real PodDisruptionBudgets (the disruption controller
runs in the controller-manager); Jobs and Deployments get their pods from the real controllers."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import generate_latest

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ALLOCATED, GPU_ASSIGNMENT, GROUP, VERSION
from scheduler.cache.cluster import EvictError
from scheduler.framework.eviction import EvictionPolicy
from scheduler.kube.runner import SchedulerRunner
from scheduler.model.parse import parse_pod
from tests.controlplane.faultproxy import FaultProxy
from tests.controlplane.scene import Scene, runner_config, wait_until
from tests.kube.helpers import pod_body

pytestmark = pytest.mark.apiserver

GIB80 = 81920


def metrics_text(runner: SchedulerRunner) -> str:
    return generate_latest(runner.metrics.registry).decode()


def fraction_pod(name: str, fraction: str = "0.5", **kw: Any) -> dict[str, Any]:
    annotations = {"gpu-fraction": fraction, **kw.pop("annotations", {})}
    return pod_body(name, annotations=annotations, **kw)


def phase_of(scene: Scene, group: str) -> str | None:
    return (scene.get("podgroups", group).get("status") or {}).get("phase")


def test_fractional_pods_are_bound_with_correct_assignments(scene: Scene) -> None:
    scene.node("gpu-1", gpus=2)
    kubelet = scene.kubelet()
    runner = scene.scheduler()
    for i in range(4):
        scene.create_pod(fraction_pod(f"half-{i}"))
    scene.create_pod(fraction_pod("quarter", "0.25"))
    wait_until(lambda: len(kubelet.allocated) == 4)
    cycles = runner.cycles
    wait_until(lambda: runner.cycles >= cycles + 5)
    pods = scene.bound()
    assert len(pods) == 4  # 2.25 GPUs asked of 2: one pod stays pending
    for pod in pods.values():
        fraction = float(pod["metadata"]["annotations"]["gpu-fraction"])
        a = GPUAssignment.from_annotation(pod["metadata"]["annotations"][GPU_ASSIGNMENT])
        # No GPUNodeReport in this test: the GPU is named by index only, never by an invented UUID.
        assert a.node == "gpu-1" and len(a.gpus) == 1 and a.gpus[0].uuid == ""
        assert (a.gpus[0].milli, a.gpus[0].memory_mib) == (round(fraction * 1000), round(fraction * GIB80))
        assert pod["status"]["phase"] == "Running"
    use = scene.gpu_use()
    assert all(v <= 1000 for v in use.values()) and sum(use.values()) in (1750, 2000)
    (waiting,) = [p for p in scene.pods() if not p["spec"].get("nodeName")]
    conditions = {c["type"]: c for c in waiting["status"].get("conditions", [])}
    assert conditions["PodScheduled"]["status"] == "False" and conditions["PodScheduled"]["message"]
    assert all(GPU_ALLOCATED in p["metadata"]["annotations"] for p in pods.values())  # one at a time each
    text = metrics_text(runner)
    assert 'tessera_pods_scheduled_total{action="allocate"} 4.0' in text
    assert 'tessera_gpu_allocated_fraction{gpu="0",node="gpu-1"}' in text


def test_gang_is_bound_whole_or_not_at_all(scene: Scene) -> None:
    scene.node("gpu-1", gpus=2)
    scene.kubelet()
    scene.podgroup("ddp", {"minMember": 3})
    scene.scheduler()
    for i in range(3):
        scene.create_pod(pod_body(f"ddp-{i}", annotations={"tessera.dev/pod-group": "ddp"},
                                  limits={"nvidia.com/gpu": "1"}))  # fmt: skip
    wait_until(lambda: phase_of(scene, "ddp") == "Unschedulable")
    assert scene.bound() == {}  # 3 whole GPUs needed, 2 exist: nobody runs
    condition = scene.get("podgroups", "ddp")["status"]["conditions"][0]
    assert condition["status"] == "False" and "gang" in condition["message"]
    scene.node("gpu-2", gpus=2)
    wait_until(lambda: len(scene.bound()) == 3)
    wait_until(lambda: phase_of(scene, "ddp") == "Running")
    assert sum(scene.gpu_use().values()) == 3000


def _indexed_job(name: str, pods: int, limits: dict[str, str]) -> dict[str, Any]:
    template = {
        "spec": {
            "schedulerName": "tessera",
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}],
        }
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"completionMode": "Indexed", "parallelism": pods, "completions": pods,
                     "template": template}}  # fmt: skip


def test_podgrouper_gang_from_a_real_indexed_job(scene: Scene) -> None:
    """The Job controller makes the pods; the podgrouper finds their Job through the ownerReferences the
    controller wrote, creates the PodGroup, and the gang waits until both pods fit."""
    scene.node("gpu-1", gpus=1)
    scene.kubelet()
    runner = scene.scheduler()
    client.BatchV1Api(scene.admin).create_namespaced_job(
        scene.ns, _indexed_job("ddp", 2, {"nvidia.com/gpu": "1"})
    )
    wait_until(lambda: len(scene.pods()) == 2)
    wait_until(
        lambda: scene.custom.list_namespaced_custom_object(GROUP, VERSION, scene.ns, "podgroups")["items"]
    )
    (group,) = scene.custom.list_namespaced_custom_object(GROUP, VERSION, scene.ns, "podgroups")["items"]
    assert group["spec"]["minMember"] == 2
    assert group["metadata"]["ownerReferences"][0]["kind"] == "Job"
    cycles = runner.cycles
    wait_until(lambda: runner.cycles >= cycles + 5)
    assert scene.bound() == {}  # half a gang is not started
    scene.node("gpu-2", gpus=1)
    wait_until(lambda: len(scene.bound()) == 2)
    assert {p["spec"]["nodeName"] for p in scene.bound().values()} == {"gpu-1", "gpu-2"}


def test_deployment_replicas_are_scheduled_one_by_one(scene: Scene) -> None:
    """ReplicaSet pods are independent: no gang, no PodGroup; each replica that fits runs."""
    scene.node("gpu-1", gpus=1)
    scene.kubelet()
    scene.scheduler()
    template = {
        "metadata": {"labels": {"app": "infer"}, "annotations": {"gpu-fraction": "0.5"}},
        "spec": {"schedulerName": "tessera", "containers": [{"name": "main", "image": "busybox"}]},
    }
    client.AppsV1Api(scene.admin).create_namespaced_deployment(scene.ns, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "infer"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "infer"}}, "template": template}})  # fmt: skip
    wait_until(lambda: len(scene.pods()) == 3)
    wait_until(lambda: len(scene.bound()) == 2)
    assert scene.gpu_use() == {("gpu-1", 0): 1000}
    assert scene.custom.list_namespaced_custom_object(GROUP, VERSION, scene.ns, "podgroups")["items"] == []


def test_bad_annotation_gets_a_clear_event_and_stays_pending(scene: Scene) -> None:
    scene.node("gpu-1", gpus=1)
    scene.kubelet()
    runner = scene.scheduler()
    scene.create_pod(fraction_pod("bad", "1.5"))
    scene.create_pod(fraction_pod("good", "0.5"))
    wait_until(lambda: scene.events_for("bad"))
    event = scene.events_for("bad")[0]
    assert event["type"] == "Warning" and event["reason"] == "InvalidRequest"
    assert 'gpu-fraction="1.5" must be strictly between 0 and 1' in event["message"]
    wait_until(lambda: "good" in scene.bound())
    cycles = runner.cycles
    wait_until(lambda: runner.cycles >= cycles + 10)
    assert "bad" not in scene.bound()
    assert (
        len(scene.events_for("bad")) == 1 and scene.events_for("bad")[0].get("count", 1) == 1
    )  # rate-limited
    scheduled = {c["type"]: c for c in scene.pod("bad")["status"]["conditions"]}["PodScheduled"]
    assert scheduled["status"] == "False" and "strictly between 0 and 1" in scheduled["message"]


def test_eviction_goes_through_the_eviction_api_and_its_budgets(scene: Scene) -> None:
    scene.node("gpu-1", gpus=1)
    kubelet = scene.kubelet()
    runner = scene.scheduler()
    scene.create_pod(fraction_pod("victim", labels={"app": "v"}))
    wait_until(lambda: f"{scene.ns}/victim" in kubelet.allocated)
    victim = parse_pod(scene.pod("victim"))
    scene.pdb("keep", {"app": "v"})
    wait_until(lambda: scene.pdb_allows("keep") == 0)  # the disruption controller saw the healthy pod
    with pytest.raises(EvictError, match="disruption budget"):
        runner.cluster.evict(victim, action="preempt", message="preempt: making room for default/urgent")
    assert scene.find_pod("victim") is not None
    client.PolicyV1Api(scene.admin).delete_namespaced_pod_disruption_budget("keep", scene.ns)
    runner.cluster.evict(victim, action="preempt", message="preempt: making room for default/urgent")
    wait_until(lambda: scene.find_pod("victim") is None)  # graceful deletion, confirmed by the "kubelet"
    events = {e["reason"]: e["message"] for e in scene.events_for("victim")}
    assert events["Preempted"] == "preempt: making room for default/urgent"
    assert "keep" in events["EvictionRefused"]  # the budget's own words
    scene.create_pod(fraction_pod("next", "0.75"))  # the freed share goes to the next pod
    wait_until(lambda: "next" in scene.bound())


def test_restart_mid_flight_never_double_allocates(scene: Scene) -> None:
    scene.node("gpu-1", gpus=1)
    scene.kubelet()
    first = scene.scheduler(runner_config("sched-a"))
    scene.create_pod(fraction_pod("a", "0.5"))
    wait_until(lambda: "a" in scene.bound())
    first.stop()
    # The first scheduler "crashed" between writing b's assignment and binding it (an older one wrote the
    # assignment before the Binding): b carries an assignment onto the GPU a already uses half of.
    scene.create_pod(fraction_pod("b", "0.5"))
    half = scene.pod("a")["metadata"]["annotations"][GPU_ASSIGNMENT]
    scene.core.patch_namespaced_pod("b", scene.ns, {"metadata": {"annotations": {GPU_ASSIGNMENT: half}}})
    for name in ("c", "d"):
        scene.create_pod(fraction_pod(name, "0.5"))
    second = scene.scheduler(runner_config("sched-b"))
    wait_until(lambda: len(scene.bound()) == 2)
    cycles = second.cycles
    wait_until(lambda: second.cycles >= cycles + 10)
    # a's half kept, exactly one other half given: the rebuilt state saw a and ignored b's unbound
    # assignment (b was never bound there).
    assert scene.gpu_use() == {("gpu-1", 0): 1000}
    assert len(scene.bound()) == 2 and "a" in scene.bound()
    pending = [p for p in scene.pods() if not p["spec"].get("nodeName")]
    assert len(pending) == 2 and all(p["status"]["conditions"] for p in pending)


def test_lost_watch_and_410_recover(scene: Scene, fault_proxy: FaultProxy) -> None:
    scene.node("gpu-1", gpus=2)
    scene.kubelet()
    runner = scene.scheduler(api=fault_proxy.client(scene.tessera.scheduler_token))
    scene.create_pod(fraction_pod("before"))
    wait_until(lambda: "before" in scene.bound())
    pods = runner.cluster.informers["Pod"]
    lists = pods.lists
    wait_until(lambda: fault_proxy.watching(r"^/api/v1/pods$"))
    fault_proxy.fail("GET", r"^/api/v1/pods$", 503, watch=True, times=1000)  # the re-watches fail...
    assert fault_proxy.drop_watches(r"^/api/v1/pods$") == 1
    scene.create_pod(fraction_pod("during"))
    wait_until(lambda: [r for r in fault_proxy.requests_matching("GET", "^/api/v1/pods$") if r.injected])
    fault_proxy.clear()
    fault_proxy.expire_watches(r"^/api/v1/pods$")  # ...then the history is gone: 410, relist
    wait_until(lambda: pods.lists > lists)
    wait_until(lambda: "during" in scene.bound())
    scene.create_pod(fraction_pod("after"))
    wait_until(lambda: "after" in scene.bound())
    assert sum(scene.gpu_use().values()) == 1500
    assert pods.errors >= 1


def test_only_the_leader_schedules_and_a_standby_takes_over(scene: Scene) -> None:
    scene.node("gpu-1", gpus=2)
    scene.kubelet()
    a = scene.scheduler(runner_config("sched-a", leader_elect=True))
    wait_until(lambda: a.is_leader)
    b = scene.scheduler(runner_config("sched-b", leader_elect=True))
    scene.create_pod(fraction_pod("one"))
    wait_until(lambda: "one" in scene.bound())
    wait_until(lambda: a.cycles > 0)  # the cycle that bound it has returned
    assert b.cycles == 0 and not b.is_leader
    a.stop()  # releases the lease
    wait_until(lambda: b.is_leader, timeout=5)
    scene.create_pod(fraction_pod("two"))
    wait_until(lambda: "two" in scene.bound())
    wait_until(lambda: b.cycles > 0)
    assert scene.gpu_use() == {("gpu-1", 0): 1000}


def test_gpu_node_report_steers_placement_away_from_an_unhealthy_gpu(scene: Scene) -> None:
    scene.node("gpu-1", gpus=2)
    gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "NVIDIA-H100-80GB-HBM3", "memoryTotalMiB": GIB80,
             "health": "Unhealthy" if i == 0 else "Healthy"} for i in range(2)]  # fmt: skip
    scene.gpu_report("gpu-1", gpus)
    scene.kubelet()
    scene.scheduler()
    for name in ("x", "y"):
        scene.create_pod(fraction_pod(name, "0.5"))
    wait_until(lambda: len(scene.bound()) == 2)
    assert scene.gpu_use() == {("gpu-1", 1): 1000}


def _team_queue(scene: Scene) -> None:
    """A queue "team" with one GPU of quota (non-preemptible pods, such as inference, only run within
    quota); the chart's PriorityClasses (train 50, inference 125) are installed for the session."""
    unlimited = {"quota": -1, "limit": -1}
    scene.queue(
        "team", {"resources": {"gpu": {"quota": 1, "limit": -1}, "cpu": unlimited, "memory": unlimited}}
    )


def team_pod(
    name: str, fraction: str, priority_class: str, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    body = fraction_pod(name, fraction, labels={"tessera.dev/queue": "team", **(labels or {})})
    body["spec"]["priorityClassName"] = priority_class
    return body


def test_preemption_evicts_through_the_eviction_api_and_binds_the_beneficiary(scene: Scene) -> None:
    scene.node("gpu-1", gpus=1)
    _team_queue(scene)
    scene.kubelet()
    runner = scene.scheduler()
    for name in ("train-0", "train-1"):
        scene.create_pod(team_pod(name, "0.5", "train"))
    wait_until(lambda: len(scene.bound()) == 2)
    scene.create_pod(team_pod("urgent", "0.5", "inference"))
    wait_until(lambda: "urgent" in scene.bound(), timeout=15)
    preempted = [
        n for n in ("train-0", "train-1") if any(e["reason"] == "Preempted" for e in scene.events_for(n))
    ]
    assert len(preempted) == 1
    (victim,) = preempted
    wait_until(lambda: scene.find_pod(victim) is None)
    (event,) = [e for e in scene.events_for(victim) if e["reason"] == "Preempted"]
    assert f"{scene.ns}/urgent" in event["message"], event["message"]
    assert scene.gpu_use() == {("gpu-1", 0): 1000}
    wait_until(lambda: 'tessera_pods_evicted_total{action="preempt"} 1.0' in metrics_text(runner))


def test_a_disruption_budget_keeps_the_victim_and_the_beneficiary_waits(scene: Scene) -> None:
    """With `--disruption-budgets respect` (the default deletes such a victim, as KAI does:
    tests/kube/test_kube_eviction.py)."""
    scene.node("gpu-1", gpus=1)
    _team_queue(scene)
    scene.pdb("keep-training", {"app": "train"})
    kubelet = scene.kubelet()
    config = runner_config()
    respect = EvictionPolicy(budgets="respect")
    runner = scene.scheduler(replace(config, scheduler=replace(config.scheduler, eviction=respect)))
    scene.create_pod(team_pod("train-0", "0.75", "train", labels={"app": "train"}))
    wait_until(lambda: f"{scene.ns}/train-0" in kubelet.allocated)
    wait_until(lambda: scene.pdb_allows("keep-training") == 0)  # healthy: the budget protects it
    scene.create_pod(team_pod("urgent", "0.5", "inference"))
    wait_until(lambda: [e for e in scene.events_for("train-0") if e["reason"] == "EvictionRefused"])
    cycles = runner.cycles
    wait_until(lambda: runner.cycles >= cycles + 5)
    assert "train-0" in scene.bound() and "urgent" not in scene.bound()
    assert not scene.pod("train-0")["metadata"].get("deletionTimestamp")
    refused = [e for e in scene.events_for("train-0") if e["reason"] == "EvictionRefused"]
    assert "keep-training" in refused[0]["message"]


def test_a_failed_cycle_rebuilds_the_state_from_the_watch_caches(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scheduler.actions import ACTIONS

    scene.node("gpu-1", gpus=1)
    scene.kubelet()
    runner = scene.scheduler()
    scene.create_pod(fraction_pod("before", "0.5"))
    wait_until(lambda: "before" in scene.bound())
    allocate = ACTIONS["allocate"]()
    calls = {"n": 0}

    class Flaky:
        name = "allocate"

        def execute(self, session: Any, cluster: Any) -> None:
            calls["n"] += 1
            if calls["n"] == 1:
                session.state.free_milli[0, 0] = 1000  # leave the state corrupt, as a half-done cycle could
                raise RuntimeError("boom")
            allocate.execute(session, cluster)

    monkeypatch.setitem(ACTIONS, "allocate", Flaky)  # for the rebuilt scheduler
    actions = runner.scheduler.actions  # the running one made its actions already
    actions[[a.name for a in actions].index("allocate")] = Flaky()
    wait_until(lambda: runner.rebuilds >= 1)
    for name in ("after-1", "after-2"):
        scene.create_pod(fraction_pod(name, "0.5"))
    wait_until(lambda: len(scene.bound()) == 2)
    cycles = runner.cycles
    wait_until(lambda: runner.cycles >= cycles + 5)
    assert scene.gpu_use() == {("gpu-1", 0): 1000}  # the corrupt free share was not given away
    assert list(runner.errors) == ["RuntimeError: boom"]


def test_the_beneficiary_waits_for_the_victims_grace_period(scene: Scene) -> None:
    scene.node("gpu-1", gpus=1)
    _team_queue(scene)
    scene.kubelet(grace_s=4)  # a victim takes 4 s to stop, as a container honouring SIGTERM would
    scene.scheduler()
    for name in ("train-0", "train-1"):
        scene.create_pod(team_pod(name, "0.5", "train"))
    wait_until(lambda: len(scene.bound()) == 2)
    scene.create_pod(team_pod("urgent", "0.5", "inference"))

    def urgent_bound() -> bool:
        assert all(milli <= 1000 for milli in scene.gpu_use().values())  # victims included, at every look
        return "urgent" in scene.bound()

    wait_until(urgent_bound, timeout=15)
    assert scene.gpu_use() == {("gpu-1", 0): 1000}  # never more than the whole GPU, victims included
