"""End to end: the real scheduling cycle, through the Kubernetes adapter and the real `kubernetes`
client, against the fake API server (with a fake kubelet/device plugin allocating bound pods)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import generate_latest

from scheduler.api.assignment import GPUAssignment
from scheduler.api.bind_lock import BindLock
from scheduler.api.keys import BIND_LOCK, GPU_ASSIGNMENT
from scheduler.cluster import EvictError
from scheduler.cycle import SchedulerConfig
from scheduler.kube.runner import RunnerConfig, SchedulerRunner
from scheduler.objects import parse_pod
from tests.fakes.kubeapi import FakeKubeAPI
from tests.kube.helpers import FakeKubelet, node_body, pod_body, wait_for

GIB80 = 81920


def runner_config(identity: str = "sched-a", leader_elect: bool = False) -> RunnerConfig:
    return RunnerConfig(
        identity=identity, cycle_interval_s=0.05, leader_elect=leader_elect, lease_namespace="kube-system",
        lease_duration_s=1.0, renew_deadline_s=0.8, retry_period_s=0.1, sync_timeout_s=5, watch_timeout_s=30,
        backoff_initial_s=0.05, scheduler=SchedulerConfig(expected_nodes=4, max_gpus_per_node=8),
    )  # fmt: skip


@pytest.fixture
def kubelet(kube_api: FakeKubeAPI) -> Iterator[FakeKubelet]:
    k = FakeKubelet(kube_api).start()
    yield k
    k.stop()


@pytest.fixture
def runner(kube_api: FakeKubeAPI) -> Iterator[SchedulerRunner]:
    r = SchedulerRunner(kube_api.client(), runner_config())
    yield r
    r.stop()


def metrics_text(runner: SchedulerRunner) -> str:
    return generate_latest(runner.metrics.registry).decode()


def fraction_pod(name: str, fraction: str = "0.5", **kw: Any) -> dict[str, Any]:
    annotations = {"gpu-fraction": fraction, **kw.pop("annotations", {})}
    return pod_body(name, annotations=annotations, **kw)


def create(kube_api: FakeKubeAPI, body: dict[str, Any]) -> dict[str, Any]:
    """Create through the API (as kubectl would), not by seeding."""
    core = client.CoreV1Api(kube_api.client())
    resp = core.create_namespaced_pod(
        body["metadata"].get("namespace", "default"), body, _preload_content=False
    )
    return dict(json.loads(resp.data))


def bound(kube_api: FakeKubeAPI) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in kube_api.objects("pods") if p["spec"].get("nodeName")}


def gpu_use(kube_api: FakeKubeAPI) -> dict[tuple[str, int], int]:
    """Milli per (node, GPU index) over all bound pods' assignments."""
    use: dict[tuple[str, int], int] = defaultdict(int)
    for pod in bound(kube_api).values():
        raw = (pod["metadata"].get("annotations") or {}).get(GPU_ASSIGNMENT)
        if raw:
            a = GPUAssignment.from_annotation(raw)
            assert a.node == pod["spec"]["nodeName"]
            for g in a.gpus:
                use[(a.node, g.index)] += g.milli
    return use


def test_fractional_pods_are_bound_with_correct_assignments(
    kube_api: FakeKubeAPI, kubelet: FakeKubelet, runner: SchedulerRunner
) -> None:
    kube_api.seed(node_body("gpu-1", gpus=2))
    runner.start()
    for i in range(4):
        create(kube_api, fraction_pod(f"half-{i}"))
    create(kube_api, fraction_pod("quarter", "0.25"))
    wait_for(lambda: len(kubelet.allocated) == 4, timeout=10)
    cycles = runner.cycles
    wait_for(lambda: runner.cycles >= cycles + 5)
    pods = bound(kube_api)
    assert len(pods) == 4  # 2.25 GPUs asked of 2: one pod stays pending
    for pod in pods.values():
        fraction = float(pod["metadata"]["annotations"]["gpu-fraction"])
        a = GPUAssignment.from_annotation(pod["metadata"]["annotations"][GPU_ASSIGNMENT])
        # No GPUNodeReport in this test: the GPU is named by index only, never by an invented UUID.
        assert a.node == "gpu-1" and len(a.gpus) == 1 and a.gpus[0].uuid == ""
        assert (a.gpus[0].milli, a.gpus[0].memory_mib) == (round(fraction * 1000), round(fraction * GIB80))
        assert pod["status"]["phase"] == "Running"
    use = gpu_use(kube_api)
    assert all(v <= 1000 for v in use.values()) and sum(use.values()) in (1750, 2000)
    (waiting,) = [p for p in kube_api.objects("pods") if not p["spec"].get("nodeName")]
    conditions = {c["type"]: c for c in waiting["status"].get("conditions", [])}
    assert conditions["PodScheduled"]["status"] == "False" and conditions["PodScheduled"]["message"]
    assert BIND_LOCK not in (kube_api.get("nodes", "gpu-1")["metadata"].get("annotations") or {})
    text = generate_latest(runner.metrics.registry).decode()
    assert 'tessera_pods_scheduled_total{action="allocate"} 4.0' in text
    assert 'tessera_gpu_allocated_fraction{gpu="0",node="gpu-1"}' in text


def test_gang_is_bound_whole_or_not_at_all(
    kube_api: FakeKubeAPI, kubelet: FakeKubelet, runner: SchedulerRunner
) -> None:
    kube_api.seed(node_body("gpu-1", gpus=2))
    custom = client.CustomObjectsApi(kube_api.client())
    custom.create_namespaced_custom_object("scheduling.tessera.dev", "v1alpha1", "default", "podgroups", {
        "apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "PodGroup", "metadata": {"name": "ddp"},
        "spec": {"minMember": 3}})  # fmt: skip
    runner.start()
    for i in range(3):
        create(
            kube_api,
            pod_body(
                f"ddp-{i}", annotations={"tessera.dev/pod-group": "ddp"}, limits={"nvidia.com/gpu": "1"}
            ),
        )
    wait_for(lambda: (kube_api.get("podgroups", "ddp").get("status") or {}).get("phase") == "Unschedulable")
    assert bound(kube_api) == {}  # 3 whole GPUs needed, 2 exist: nobody runs
    condition = kube_api.get("podgroups", "ddp")["status"]["conditions"][0]
    assert condition["status"] == "False" and "gang" in condition["message"]
    kube_api.seed(node_body("gpu-2", gpus=2))
    wait_for(lambda: len(bound(kube_api)) == 3, timeout=10)
    wait_for(lambda: (kube_api.get("podgroups", "ddp").get("status") or {}).get("phase") == "Running")
    assert sum(gpu_use(kube_api).values()) == 3000


def test_podgrouper_gang_from_a_pytorchjob(
    kube_api: FakeKubeAPI, kubelet: FakeKubelet, runner: SchedulerRunner
) -> None:
    kube_api.seed(node_body("gpu-1", gpus=4))
    job = kube_api.seed(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "ddp", "namespace": "default"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 1}}},
        }
    )
    ref = [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "name": "ddp",
            "uid": job["metadata"]["uid"],
            "controller": True,
        }
    ]
    runner.start()
    master = pod_body("ddp-master-0", limits={"nvidia.com/gpu": "1"})
    master["metadata"]["ownerReferences"] = ref
    create(kube_api, master)
    wait_for(lambda: kube_api.objects("podgroups"))
    group = kube_api.objects("podgroups")[0]
    assert group["spec"]["minMember"] == 2 and group["metadata"]["ownerReferences"][0]["name"] == "ddp"
    wait_for(lambda: runner.cycles >= 5)
    assert bound(kube_api) == {}  # half a gang is not started
    worker = pod_body("ddp-worker-0", limits={"nvidia.com/gpu": "1"})
    worker["metadata"]["ownerReferences"] = ref
    create(kube_api, worker)
    wait_for(lambda: len(bound(kube_api)) == 2, timeout=10)


def test_bad_annotation_gets_a_clear_event_and_stays_pending(
    kube_api: FakeKubeAPI, kubelet: FakeKubelet, runner: SchedulerRunner
) -> None:
    kube_api.seed(node_body("gpu-1", gpus=1))
    runner.start()
    create(kube_api, fraction_pod("bad", "1.5"))
    create(kube_api, fraction_pod("good", "0.5"))
    wait_for(lambda: kube_api.events_for("bad"))
    event = kube_api.events_for("bad")[0]
    assert event["type"] == "Warning" and event["reason"] == "InvalidRequest"
    assert 'gpu-fraction="1.5" must be strictly between 0 and 1' in event["message"]
    wait_for(lambda: "good" in bound(kube_api))
    cycles = runner.cycles
    wait_for(lambda: runner.cycles >= cycles + 10)
    assert "bad" not in bound(kube_api)
    assert len(kube_api.events_for("bad")) == 1  # rate-limited: one event, not one per cycle
    scheduled = {c["type"]: c for c in kube_api.get("pods", "bad")["status"]["conditions"]}["PodScheduled"]
    assert scheduled["status"] == "False" and "strictly between 0 and 1" in scheduled["message"]


def test_eviction_goes_through_the_eviction_api(
    kube_api: FakeKubeAPI, kubelet: FakeKubelet, runner: SchedulerRunner
) -> None:
    kube_api.seed(node_body("gpu-1", gpus=1))
    runner.start()
    create(kube_api, fraction_pod("victim", labels={"app": "v"}))
    wait_for(lambda: "victim" in kubelet.allocated[-1:] or "default/victim" in kubelet.allocated)
    victim = parse_pod(kube_api.get("pods", "victim"))
    kube_api.seed(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "v"}}},
        }
    )
    with pytest.raises(EvictError, match="disruption budget"):
        runner.cluster.evict(victim, action="preempt", message="preempt: making room for default/urgent")
    assert kube_api.find("pods", "victim") is not None
    kube_api.remove("poddisruptionbudgets", "keep", "default")
    runner.cluster.evict(victim, action="preempt", message="preempt: making room for default/urgent")
    assert kube_api.find("pods", "victim") is None
    post = kube_api.requests_matching("POST", "/pods/victim/eviction$")[-1]
    assert post.status == 201 and post.body["deleteOptions"]["preconditions"]["uid"] == victim.uid
    assert {e["reason"]: e["message"] for e in kube_api.events_for("victim")}["Preempted"] == (
        "preempt: making room for default/urgent"
    )
    # The freed share goes to the next pod.
    create(kube_api, fraction_pod("next", "0.75"))
    wait_for(lambda: "next" in bound(kube_api), timeout=10)


def test_restart_mid_flight_never_double_allocates(kube_api: FakeKubeAPI, kubelet: FakeKubelet) -> None:
    kube_api.seed(node_body("gpu-1", gpus=1))
    first = SchedulerRunner(kube_api.client(), runner_config("sched-a")).start()
    create(kube_api, fraction_pod("a", "0.5"))
    wait_for(lambda: "a" in bound(kube_api))
    first.stop()
    # The first scheduler "crashed" between writing b's assignment and binding it: b carries an
    # assignment onto the GPU a already uses half of, and holds the node's bind lock.
    b = create(kube_api, fraction_pod("b", "0.5"))
    half = GPUAssignment.from_annotation(kube_api.get("pods", "a")["metadata"]["annotations"][GPU_ASSIGNMENT])
    kube_api.modify(
        "pods", "b", lambda p: p["metadata"]["annotations"].update({GPU_ASSIGNMENT: half.to_annotation()})
    )
    lock = BindLock.for_pod("default", "b", b["metadata"]["uid"])
    kube_api.modify(
        "nodes",
        "gpu-1",
        lambda n: n["metadata"].setdefault("annotations", {}).update({BIND_LOCK: lock.to_annotation()}),
    )
    for name in ("c", "d"):
        create(kube_api, fraction_pod(name, "0.5"))
    second = SchedulerRunner(kube_api.client(), runner_config("sched-b")).start()
    try:
        wait_for(lambda: len(bound(kube_api)) == 2, timeout=10)
        cycles = second.cycles
        wait_for(lambda: second.cycles >= cycles + 10)
        # a's half kept, exactly one other half given: the rebuilt state saw a, ignored b's unbound
        # assignment, and b's lock did not block (b was never bound there).
        assert dict(gpu_use(kube_api)) == {("gpu-1", 0): 1000}
        assert len(bound(kube_api)) == 2 and "a" in bound(kube_api)
        pending = [p for p in kube_api.objects("pods") if not p["spec"].get("nodeName")]
        assert len(pending) == 2 and all(p["status"]["conditions"] for p in pending)
    finally:
        second.stop()


def test_lost_watch_410_recovers(
    kube_api: FakeKubeAPI, kubelet: FakeKubelet, runner: SchedulerRunner
) -> None:
    kube_api.seed(node_body("gpu-1", gpus=2))
    runner.start()
    create(kube_api, fraction_pod("before"))
    wait_for(lambda: "before" in bound(kube_api))
    pods = runner.cluster.informers["Pod"]
    lists = pods.lists
    kube_api.fail_next("GET", r"/api/v1/pods$", code=503, times=1)  # the re-watch fails once...
    kube_api.drop_watches()
    create(kube_api, fraction_pod("during"))
    kube_api.expire_history()  # ...and by the next try the history is gone: 410, relist
    wait_for(lambda: pods.lists > lists, timeout=10)
    wait_for(lambda: "during" in bound(kube_api), timeout=10)
    create(kube_api, fraction_pod("after"))
    wait_for(lambda: "after" in bound(kube_api), timeout=10)
    assert sum(gpu_use(kube_api).values()) == 1500


def test_only_the_leader_schedules_and_a_standby_takes_over(
    kube_api: FakeKubeAPI, kubelet: FakeKubelet
) -> None:
    kube_api.seed(node_body("gpu-1", gpus=2))
    # Leases long enough that a loaded test machine does not make the leader miss its renewals.
    slow = {"lease_duration_s": 3.0, "renew_deadline_s": 2.5}
    a = SchedulerRunner(
        kube_api.client(), replace(runner_config("sched-a", leader_elect=True), **slow)
    ).start()
    wait_for(lambda: a.is_leader)
    b = SchedulerRunner(
        kube_api.client(), replace(runner_config("sched-b", leader_elect=True), **slow)
    ).start()
    try:
        create(kube_api, fraction_pod("one"))
        wait_for(lambda: "one" in bound(kube_api))
        wait_for(lambda: a.cycles > 0)  # the cycle that bound it has returned
        assert b.cycles == 0 and not b.is_leader
        a.stop()  # releases the lease
        wait_for(lambda: b.is_leader, timeout=5)
        create(kube_api, fraction_pod("two"))
        wait_for(lambda: "two" in bound(kube_api), timeout=10)
        wait_for(lambda: b.cycles > 0)
        assert dict(gpu_use(kube_api)) == {("gpu-1", 0): 1000}
    finally:
        b.stop()


def test_gpu_node_report_steers_placement_away_from_an_unhealthy_gpu(
    kube_api: FakeKubeAPI, kubelet: FakeKubelet, runner: SchedulerRunner
) -> None:
    kube_api.seed(node_body("gpu-1", gpus=2))
    gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "NVIDIA-H100-80GB-HBM3", "memoryTotalMiB": GIB80,
             "health": "Unhealthy" if i == 0 else "Healthy"} for i in range(2)]  # fmt: skip
    kube_api.seed({"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "GPUNodeReport",
                   "metadata": {"name": "gpu-1"},
                   "spec": {"node": "gpu-1", "observedAt": "2026-12-02T10:00:00Z", "gpus": gpus}})  # fmt: skip
    runner.start()
    for name in ("x", "y"):
        create(kube_api, fraction_pod(name, "0.5"))
    wait_for(lambda: len(bound(kube_api)) == 2, timeout=10)
    assert dict(gpu_use(kube_api)) == {("gpu-1", 1): 1000}


def _priority_classes(kube_api: FakeKubeAPI) -> None:
    """The chart's priority classes, and a queue "team" with one GPU of quota (non-preemptible pods, such as
    inference, only run within quota)."""
    sched = client.SchedulingV1Api(kube_api.client())
    for name, value in (("train", 50), ("inference", 125)):
        sched.create_priority_class(
            client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value)
        )
    unlimited = {"quota": -1, "limit": -1}
    kube_api.seed({"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "team"},
                   "spec": {"resources": {"gpu": {"quota": 1, "limit": -1}, "cpu": unlimited,
                                          "memory": unlimited}}})  # fmt: skip


def team_pod(
    name: str, fraction: str, priority_class: str, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    body = fraction_pod(name, fraction, labels={"tessera.dev/queue": "team", **(labels or {})})
    body["spec"]["priorityClassName"] = priority_class
    return body


def test_preemption_evicts_through_the_eviction_api_and_binds_the_beneficiary(
    kube_api: FakeKubeAPI, kubelet: FakeKubelet, runner: SchedulerRunner
) -> None:
    kube_api.seed(node_body("gpu-1", gpus=1))
    _priority_classes(kube_api)
    runner.start()
    for name in ("train-0", "train-1"):
        create(kube_api, team_pod(name, "0.5", "train"))
    wait_for(lambda: len(bound(kube_api)) == 2, timeout=10)
    create(kube_api, team_pod("urgent", "0.5", "inference"))
    wait_for(lambda: "urgent" in bound(kube_api), timeout=15)
    evictions = [r for r in kube_api.requests_matching("POST", "/eviction$") if r.status == 201]
    assert len(evictions) == 1
    victim = evictions[0].path.split("/")[-2]
    assert kube_api.find("pods", victim) is None
    (event,) = [e for e in kube_api.events_for(victim) if e["reason"] == "Preempted"]
    assert "default/urgent" in event["message"], event["message"]
    assert dict(gpu_use(kube_api)) == {("gpu-1", 0): 1000}
    wait_for(lambda: 'tessera_pods_evicted_total{action="preempt"} 1.0' in metrics_text(runner))


def test_a_disruption_budget_keeps_the_victim_and_the_beneficiary_waits(
    kube_api: FakeKubeAPI, kubelet: FakeKubelet, runner: SchedulerRunner
) -> None:
    kube_api.seed(node_body("gpu-1", gpus=1))
    _priority_classes(kube_api)
    kube_api.seed({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                   "metadata": {"name": "keep-training", "namespace": "default"},
                   "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}}})  # fmt: skip
    runner.start()
    create(kube_api, team_pod("train-0", "0.75", "train", labels={"app": "train"}))
    wait_for(lambda: "train-0" in bound(kube_api), timeout=10)
    kube_api.set_pod_phase("train-0")  # healthy, so the budget protects it
    create(kube_api, team_pod("urgent", "0.5", "inference"))
    wait_for(lambda: kube_api.requests_matching("POST", "/pods/train-0/eviction$"), timeout=10)
    cycles = runner.cycles
    wait_for(lambda: runner.cycles >= cycles + 5)
    assert "train-0" in bound(kube_api) and "urgent" not in bound(kube_api)
    assert all(r.status == 429 for r in kube_api.requests_matching("POST", "/eviction$"))
    refused = [e for e in kube_api.events_for("train-0") if e["reason"] == "EvictionRefused"]
    assert refused and "keep-training" in refused[0]["message"]


def test_a_failed_cycle_rebuilds_the_state_from_the_watch_caches(
    kube_api: FakeKubeAPI, kubelet: FakeKubelet, runner: SchedulerRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scheduler.actions import ACTIONS

    kube_api.seed(node_body("gpu-1", gpus=1))
    runner.start()
    create(kube_api, fraction_pod("before", "0.5"))
    wait_for(lambda: "before" in bound(kube_api))
    allocate = ACTIONS["allocate"]
    calls = {"n": 0}

    def flaky(session: Any, cluster: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            session.cache.state.free_milli[0, 0] = 1000  # leave the state corrupt, as a half-done cycle could
            raise RuntimeError("boom")
        allocate(session, cluster)

    monkeypatch.setitem(ACTIONS, "allocate", flaky)
    wait_for(lambda: runner.rebuilds >= 1)
    for name in ("after-1", "after-2"):
        create(kube_api, fraction_pod(name, "0.5"))
    wait_for(lambda: len(bound(kube_api)) == 2, timeout=10)
    cycles = runner.cycles
    wait_for(lambda: runner.cycles >= cycles + 5)
    assert dict(gpu_use(kube_api)) == {("gpu-1", 0): 1000}  # the corrupt free share was not given away
    assert runner.errors == ["RuntimeError: boom"]
