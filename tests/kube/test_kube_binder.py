"""Binder, evictor and event recorder on the real kube-apiserver, as the scheduler's ServiceAccount.

Requests go through the fault proxy where a test needs to see them (the order of writes) or to make the
server fail (a 500 on the Binding); everything else the real server decides: JSON-patch tests, the
Binding subresource's rules, PodDisruptionBudgets through the disruption controller, eviction
preconditions, Event aggregation.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from scheduler.api.assignment import AssignedGPU, GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT
from scheduler.kube.binder import Binder
from scheduler.kube.evictor import Evictor
from scheduler.kube.recorder import EventRecorder, ObjectRef
from tests.controlplane.faultproxy import FaultProxy
from tests.controlplane.scene import Scene, wait_until
from tests.kube.helpers import pod_body

pytestmark = pytest.mark.apiserver


@pytest.fixture
def core(scene: Scene) -> client.CoreV1Api:
    """The scheduler's identity, straight to the server."""
    return client.CoreV1Api(scene.tessera.scheduler_client())


@pytest.fixture
def proxied(scene: Scene, fault_proxy: FaultProxy) -> client.CoreV1Api:
    """The scheduler's identity through the fault proxy."""
    return client.CoreV1Api(fault_proxy.client(scene.tessera.scheduler_token))


def _assignment(node: str = "n1", milli: int = 500) -> GPUAssignment:
    return GPUAssignment(node=node, gpus=[AssignedGPU(index=0, uuid="GPU-0", milli=milli, memory_mib=40960)])


def _new_pod(scene: Scene, name: str, **kw: object) -> str:
    return str(scene.create_pod(pod_body(name, annotations={"gpu-fraction": "0.5"}, **kw))["metadata"]["uid"])  # type: ignore[arg-type]


def test_a_bind_is_one_request_carrying_the_assignment(
    scene: Scene, proxied: client.CoreV1Api, fault_proxy: FaultProxy
) -> None:
    """The Binding's annotations are copied onto the pod by the server, in the same write as its node; no
    node is written (no bind lock: DESIGN.md step 3), whether Tessera's device plugin serves it or not."""
    scene.node("n1", gpus=1)
    uid = _new_pod(scene, "p")
    result = Binder(proxied).bind(scene.ns, "p", uid, "n1", _assignment())
    assert result.ok, result.reason
    pod = scene.pod("p")
    assert pod["spec"]["nodeName"] == "n1"
    assert GPUAssignment.from_annotation(pod["metadata"]["annotations"][GPU_ASSIGNMENT]).gpus[0].milli == 500
    assert pod["metadata"]["annotations"]["gpu-fraction"] == "0.5"  # other annotations kept
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["PodScheduled"] == "True"
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in fault_proxy.requests] == [("POST", "binding")]


def test_a_failed_binding_writes_nothing_and_is_retried(
    scene: Scene, proxied: client.CoreV1Api, fault_proxy: FaultProxy
) -> None:
    scene.node("n1", gpus=1)
    uid = _new_pod(scene, "p")
    fault_proxy.fail("POST", r"/pods/p/binding$", 500, "etcd timeout")
    result = Binder(proxied).bind(scene.ns, "p", uid, "n1", _assignment())
    assert not result.ok and result.retry and "etcd timeout" in result.reason
    pod = scene.pod("p")
    assert "nodeName" not in pod["spec"] and GPU_ASSIGNMENT not in pod["metadata"]["annotations"]


def test_binding_a_bound_pod_is_a_conflict(scene: Scene, core: client.CoreV1Api) -> None:
    """The real Binding subresource refuses a pod that already has a node (409)."""
    scene.node("n1", gpus=1)
    scene.node("n2", gpus=1)
    uid = _new_pod(scene, "p", node="n2")
    result = Binder(core).bind(scene.ns, "p", uid, "n1", _assignment())
    assert not result.ok and "is already assigned to node" in result.reason, result.reason
    assert GPU_ASSIGNMENT not in scene.pod("p")["metadata"]["annotations"]


def test_bind_of_a_replaced_pod_is_refused_by_its_uid(scene: Scene, core: client.CoreV1Api) -> None:
    scene.node("n1", gpus=1)
    _new_pod(scene, "p")
    result = Binder(core).bind(scene.ns, "p", "old-uid", "n1", _assignment())
    assert not result.ok and "old-uid" in result.reason, result.reason
    pod = scene.pod("p")
    assert "nodeName" not in pod["spec"] and GPU_ASSIGNMENT not in pod["metadata"]["annotations"]


def test_pod_without_gpu_binds_without_an_assignment(
    scene: Scene, proxied: client.CoreV1Api, fault_proxy: FaultProxy
) -> None:
    scene.node("n1")
    uid = str(scene.create_pod(pod_body("cpu"))["metadata"]["uid"])
    assert Binder(proxied).bind(scene.ns, "cpu", uid, "n1", None).ok
    pod = scene.pod("cpu")
    assert pod["spec"]["nodeName"] == "n1" and GPU_ASSIGNMENT not in (
        pod["metadata"].get("annotations") or {}
    )
    assert not fault_proxy.requests_matching("PATCH")


MSG = "reclaim: evicted to make room for team-b/trainer-0 (queue team-b below its fair share)"


def _running(scene: Scene, name: str, labels: dict[str, str]) -> str:
    """A pod bound to n1 that its kubelet reports Running and Ready (so a budget counts it healthy)."""
    uid = str(scene.create_pod(pod_body(name, node="n1", labels=labels))["metadata"]["uid"])
    ready = [{"type": "Ready", "status": "True"}]
    scene.core.patch_namespaced_pod_status(
        name, scene.ns, {"status": {"phase": "Running", "conditions": ready}}
    )
    return uid


def test_eviction_with_event_and_a_real_disruption_budget(
    scene: Scene, proxied: client.CoreV1Api, fault_proxy: FaultProxy
) -> None:
    scene.node("n1")
    uid = _running(scene, "victim", {"app": "v"})
    evictor = Evictor(proxied, EventRecorder(proxied))
    scene.pdb("keep", {"app": "v"})
    wait_until(lambda: scene.pdb_allows("keep") == 0)
    refused = evictor.evict(scene.ns, "victim", uid, "reclaim", MSG)
    assert not refused.ok and "disruption budget" in refused.reason and "keep" in refused.reason
    assert not scene.pod("victim")["metadata"].get("deletionTimestamp")
    assert fault_proxy.requests_matching("POST", "/eviction$")[-1].status == 429
    client.PolicyV1Api(scene.admin).delete_namespaced_pod_disruption_budget("keep", scene.ns)
    done = evictor.evict(scene.ns, "victim", uid, "reclaim", MSG)
    assert done.ok
    # Graceful deletion: the pod terminates (its kubelet would confirm after the grace period).
    victim = scene.pod("victim")["metadata"]
    assert victim["deletionTimestamp"] and victim["deletionGracePeriodSeconds"] == 30
    reasons = {e["reason"]: e["message"] for e in scene.events_for("victim")}
    assert reasons["Reclaimed"] == MSG and "was refused" in reasons["EvictionRefused"]
    body = fault_proxy.requests_matching("POST", "/eviction$")[-1].body
    assert body["deleteOptions"]["preconditions"]["uid"] == uid
    scene.core.delete_namespaced_pod("victim", scene.ns, body=client.V1DeleteOptions(grace_period_seconds=0))
    assert evictor.evict(scene.ns, "victim", uid, "preempt", "").ok  # already gone


def test_eviction_of_a_replaced_pod_is_refused_by_its_uid(scene: Scene, core: client.CoreV1Api) -> None:
    scene.node("n1")
    _running(scene, "p", {})
    result = Evictor(core, EventRecorder(core)).evict(scene.ns, "p", "stale-uid", "preempt", "")
    assert not result.ok and "the UID in the precondition (stale-uid) does not match" in result.reason
    assert not scene.pod("p")["metadata"].get("deletionTimestamp")


def test_recorder_aggregates_and_rate_limits(scene: Scene, core: client.CoreV1Api) -> None:
    now = [0.0]
    recorder = EventRecorder(core, min_interval_s=30, clock=lambda: now[0])
    ref = ObjectRef("Pod", scene.ns, "p", "uid-1")
    assert recorder.record(ref, "FailedScheduling", "no GPU", rate_limited=True)
    assert not recorder.record(ref, "FailedScheduling", "no GPU", rate_limited=True)
    now[0] = 31
    assert recorder.record(ref, "FailedScheduling", "no GPU", rate_limited=True)
    assert recorder.record(ref, "FailedScheduling", "queue over limit", rate_limited=True)
    events = scene.events_for("p")
    assert sorted((e["message"], e["count"]) for e in events) == [("no GPU", 2), ("queue over limit", 1)]
    assert all(e["source"]["component"] == "tessera" for e in events)
    assert {e["involvedObject"]["uid"] for e in events} == {"uid-1"}


def test_a_throttled_eviction_is_refused_and_retried_later(
    scene: Scene, proxied: client.CoreV1Api, fault_proxy: FaultProxy
) -> None:
    """429 without a budget behind it (the API server's priority and fairness throttling): the eviction is
    not done, says why, and the next try goes through."""
    scene.node("n1")
    uid = _running(scene, "victim", {})
    evictor = Evictor(proxied, EventRecorder(proxied))
    fault_proxy.fail("POST", "/eviction$", 429, "Too many requests, please try again later.")
    refused = evictor.evict(scene.ns, "victim", uid, "preempt", "")
    assert not refused.ok and "Too many requests" in refused.reason
    assert not scene.pod("victim")["metadata"].get("deletionTimestamp")
    assert evictor.evict(scene.ns, "victim", uid, "preempt", "").ok
    assert scene.pod("victim")["metadata"]["deletionTimestamp"]
