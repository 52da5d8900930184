"""Binder, evictor and event recorder on the real kube-apiserver, as the scheduler's ServiceAccount.

Requests go through the fault proxy where a test needs to see them (the order of writes) or to make the
server fail (a 500 on the Binding); everything else the real server decides: JSON-patch tests, the
Binding subresource's rules, PodDisruptionBudgets through the disruption controller, eviction
preconditions, Event aggregation.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from scheduler.api.assignment import AssignedGPU, GPUAssignment
from scheduler.api.bind_lock import BindLock
from scheduler.api.keys import BIND_LOCK, GPU_ALLOCATED, GPU_ASSIGNMENT
from scheduler.kube.binder import Binder
from scheduler.kube.evictor import Evictor
from scheduler.kube.informer import Informer, WatchTarget
from scheduler.kube.lock_view import NodeLockView
from scheduler.kube.recorder import EventRecorder, ObjectRef
from tests.controlplane.faultproxy import FaultProxy
from tests.controlplane.scene import Scene, wait_until
from tests.kube.helpers import pod_body

TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"  # kube-controller-manager's TTL controller sets it on nodes

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


def _lock_of(scene: Scene, node: str = "n1") -> str | None:
    return (scene.node_obj(node)["metadata"].get("annotations") or {}).get(BIND_LOCK)


def _writes(fault_proxy: FaultProxy) -> list[tuple[str, str, int]]:
    return [(r.method, r.path.rsplit("/", 1)[-1], r.status) for r in fault_proxy.requests
            if r.method in ("PATCH", "POST", "PUT")]  # fmt: skip


def test_bind_without_lock_is_one_request_carrying_the_assignment(
    scene: Scene, proxied: client.CoreV1Api, fault_proxy: FaultProxy
) -> None:
    """The Binding's annotations are copied onto the pod by the server, in the same write as its node."""
    scene.node("n1", gpus=1, device_plugin=False)
    uid = _new_pod(scene, "p")
    result = Binder(proxied).bind(scene.ns, "p", uid, "n1", _assignment())
    assert result.ok, result.reason
    pod = scene.pod("p")
    assert pod["spec"]["nodeName"] == "n1"
    assert GPUAssignment.from_annotation(pod["metadata"]["annotations"][GPU_ASSIGNMENT]).gpus[0].milli == 500
    assert pod["metadata"]["annotations"]["gpu-fraction"] == "0.5"  # other annotations kept
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["PodScheduled"] == "True"
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in fault_proxy.requests] == [("POST", "binding")]
    assert _lock_of(scene) is None


def _settled_meta(scene: Scene, name: str) -> dict[str, Any]:
    """The node's metadata once the controllers' first writes to a new node (the TTL controller's
    annotation among them) have landed and it has stayed unchanged for a second: a copy read before them
    is stale by the time the binder patches, as a watch cache can be, which
    `test_a_stale_cached_node_is_read_again` covers; here the cache is meant current. (Under load a
    controller wrote the node after the TTL annotation, and the lock PATCH got a 422.)"""
    deadline = time.monotonic() + 20
    meta: dict[str, Any] = scene.node_obj(name)["metadata"]
    since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now: dict[str, Any] = scene.node_obj(name)["metadata"]
        if now.get("resourceVersion") != meta.get("resourceVersion"):
            meta, since = now, time.monotonic()
        elif TTL_ANNOTATION in (meta.get("annotations") or {}) and time.monotonic() - since >= 1.0:
            break
    return meta


def test_bind_with_lock_takes_it_from_the_cached_node_then_binds(
    scene: Scene, proxied: client.CoreV1Api, fault_proxy: FaultProxy
) -> None:
    scene.node("n1", gpus=1)
    uid = _new_pod(scene, "p")
    cached = _settled_meta(scene, "n1")  # as the watch cache has it
    fault_proxy.clear_requests()
    result = Binder(proxied).bind(scene.ns, "p", uid, "n1", _assignment(), lock=True, node_meta=cached)
    assert result.ok, result.reason
    lock = BindLock.from_annotation(_lock_of(scene) or "")
    assert (lock.uid, lock.namespace, lock.name) == (uid, scene.ns, "p")
    # The lock (guarded by the node's resourceVersion), then the Binding with the assignment: no read.
    assert [(r.method, r.path.rsplit("/", 1)[-1], r.status) for r in fault_proxy.requests] == [
        ("PATCH", "n1", 200), ("POST", "binding", 201)]  # fmt: skip
    assert GPU_ASSIGNMENT in scene.pod("p")["metadata"]["annotations"]


def test_a_stale_cached_node_is_read_again(
    scene: Scene, proxied: client.CoreV1Api, fault_proxy: FaultProxy
) -> None:
    scene.node("n1", gpus=1)
    uid = _new_pod(scene, "p")
    cached = scene.node_obj("n1")["metadata"]
    scene.core.patch_node("n1", {"metadata": {"labels": {"touched": "yes"}}})  # a controller wrote since
    fault_proxy.clear_requests()
    assert Binder(proxied).bind(scene.ns, "p", uid, "n1", _assignment(), lock=True, node_meta=cached).ok
    methods = [(r.method, r.status) for r in fault_proxy.requests]
    # The stale guard fails, the node is read again and the lock taken; the control plane's node controller
    # may write the new node once more between that read and the patch (seen under load), which costs one
    # more read, not the bind.
    stale, settled = [("PATCH", 422), ("GET", 200)], [("PATCH", 200), ("POST", 201)]
    assert methods in (stale + settled, stale + stale + settled), methods
    assert BindLock.from_annotation(_lock_of(scene) or "").uid == uid


def test_second_pod_waits_for_the_device_plugin_then_proceeds(scene: Scene, core: client.CoreV1Api) -> None:
    scene.node("n1", gpus=1)
    first, second = _new_pod(scene, "a"), _new_pod(scene, "b")
    binder = Binder(core)
    assert binder.bind(scene.ns, "a", first, "n1", _assignment(), lock=True).ok
    blocked = binder.bind(scene.ns, "b", second, "n1", _assignment(), lock=True)
    assert not blocked.ok and blocked.retry and blocked.busy
    assert f"waiting for the device plugin to allocate {scene.ns}/a" in blocked.reason
    b = scene.pod("b")
    assert "nodeName" not in b["spec"] and GPU_ASSIGNMENT not in (b["metadata"].get("annotations") or {})
    # The device plugin served a (it marks the pod) and the kubelet admitted it: the lock is free for b.
    scene.core.patch_namespaced_pod("a", scene.ns, {"metadata": {"annotations": {GPU_ALLOCATED: "true"}}})
    _admitted_by_kubelet(scene, "a")
    assert binder.bind(scene.ns, "b", second, "n1", _assignment(), lock=True).ok


def _admitted_by_kubelet(scene: Scene, name: str) -> None:
    """What the kubelet writes once it admitted a pod (Allocate is called during admission): container
    statuses, the containers still being created."""
    waiting = {"waiting": {"reason": "ContainerCreating"}}
    statuses = [{"name": "main", "image": "busybox", "imageID": "", "ready": False, "restartCount": 0,
                 "state": waiting}]  # fmt: skip
    scene.core.patch_namespaced_pod_status(
        name, scene.ns, {"status": {"phase": "Pending", "containerStatuses": statuses}}
    )


def _lock_view(scene: Scene) -> tuple[NodeLockView, list[Informer]]:
    """The scheduler's view of the locks, from its own watch caches of nodes and pods."""
    core = client.CoreV1Api(scene.tessera.scheduler_client())
    nodes = Informer(WatchTarget("Node", core.list_node), lambda ev: None)
    pods = Informer(WatchTarget("Pod", core.list_pod_for_all_namespaces), lambda ev: None)
    for informer in (nodes, pods):
        informer.start()
        scene.on_cleanup(informer.stop)
        assert informer.synced.wait(10)
    return NodeLockView(nodes, pods, timeout_s=300), [nodes, pods]


def test_a_gpu_allocated_mark_preset_by_the_pods_user_does_not_free_the_lock(
    scene: Scene, core: client.CoreV1Api
) -> None:
    """Issue 14: the pod's own user may write `tessera.dev/gpu-allocated` on their pod (on a cluster without
    the webhook, or before it); the scheduler took it for the device plugin's word and freed the node's
    lock before the pod was served, so the next pod bound there could take its Allocate answer. Only the
    mark together with the kubelet's admission (container statuses, which users cannot write) counts."""
    scene.node("n1", gpus=1)
    preset = {"gpu-fraction": "0.5", GPU_ALLOCATED: "2026-01-01T00:00:00Z"}
    first = str(scene.create_pod(pod_body("a", annotations=preset))["metadata"]["uid"])
    second = _new_pod(scene, "b")
    binder = Binder(core)
    assert binder.bind(scene.ns, "a", first, "n1", _assignment(), lock=True).ok
    view, (nodes, pods) = _lock_view(scene)
    wait_until(lambda: BIND_LOCK in ((nodes.get("n1") or {}).get("metadata", {}).get("annotations") or {}))
    wait_until(lambda: (pods.get(f"{scene.ns}/a") or {}).get("spec", {}).get("nodeName") == "n1")
    holder = view.holder("n1")
    assert holder is not None and holder.uid == first  # the cycle sees n1 locked
    blocked = binder.bind(scene.ns, "b", second, "n1", _assignment(), lock=True)
    assert not blocked.ok and blocked.busy and f"allocate {scene.ns}/a" in blocked.reason
    _admitted_by_kubelet(scene, "a")
    wait_until(lambda: view.holder("n1") is None)
    assert binder.bind(scene.ns, "b", second, "n1", _assignment(), lock=True).ok


def test_stale_lock_times_out(scene: Scene, core: client.CoreV1Api) -> None:
    scene.node("n1", gpus=1)
    first, second = _new_pod(scene, "a"), _new_pod(scene, "b")
    assert Binder(core).bind(scene.ns, "a", first, "n1", _assignment(), lock=True).ok
    later = Binder(core, lock_timeout_s=30, clock=lambda: datetime.now(UTC) + timedelta(seconds=31))
    assert later.bind(scene.ns, "b", second, "n1", _assignment(), lock=True).ok


def test_failed_binding_releases_the_lock(
    scene: Scene, proxied: client.CoreV1Api, fault_proxy: FaultProxy
) -> None:
    scene.node("n1", gpus=1)
    uid = _new_pod(scene, "p")
    fault_proxy.fail("POST", r"/pods/p/binding$", 500, "etcd timeout")
    result = Binder(proxied).bind(scene.ns, "p", uid, "n1", _assignment(), lock=True)
    assert not result.ok and result.retry and "etcd timeout" in result.reason
    pod = scene.pod("p")
    assert "nodeName" not in pod["spec"] and GPU_ASSIGNMENT not in pod["metadata"]["annotations"]
    assert _lock_of(scene) is None


def test_releasing_the_lock_survives_a_node_that_changes_meanwhile(
    scene: Scene, proxied: client.CoreV1Api, fault_proxy: FaultProxy
) -> None:
    """A node changes all the time (kubelet status, the node controller's taints): the guarded removal of a
    bind lock loses that race on the real server (its JSON-patch test fails, 422), and must try again rather
    than leave the node locked until the lock times out."""
    scene.node("n1", gpus=1)
    uid = _new_pod(scene, "p")
    assert Binder(proxied).bind(scene.ns, "p", uid, "n1", _assignment(), lock=True).ok
    assert _lock_of(scene) is not None
    fault_proxy.clear_requests()
    fault_proxy.slow("PATCH", r"/nodes/n1$", 1.0)  # the removal reaches the server after the change below
    released: list[bool] = []
    worker = threading.Thread(target=lambda: released.append(Binder(proxied).release_lock("n1", uid)))
    worker.start()
    wait_until(lambda: fault_proxy.requests_matching("GET", r"/nodes/n1$"), timeout=5)
    scene.core.patch_node("n1", {"metadata": {"labels": {"changed": "meanwhile"}}})
    worker.join(timeout=20)
    assert released == [True] and _lock_of(scene) is None
    patches = fault_proxy.requests_matching("PATCH", r"/nodes/n1$")
    assert [r.status for r in patches[-2:]] == [422, 200]


def test_binding_a_bound_pod_is_a_conflict_and_releases_the_lock(
    scene: Scene, core: client.CoreV1Api
) -> None:
    """The real Binding subresource refuses a pod that already has a node (409)."""
    scene.node("n1", gpus=1)
    scene.node("n2", gpus=1)
    uid = _new_pod(scene, "p", node="n2")
    result = Binder(core).bind(scene.ns, "p", uid, "n1", _assignment(), lock=True)
    assert not result.ok and "is already assigned to node" in result.reason, result.reason
    assert _lock_of(scene) is None and GPU_ASSIGNMENT not in scene.pod("p")["metadata"]["annotations"]


def test_bind_of_a_replaced_pod_is_refused_by_its_uid(scene: Scene, core: client.CoreV1Api) -> None:
    scene.node("n1", gpus=1)
    _new_pod(scene, "p")
    result = Binder(core).bind(scene.ns, "p", "old-uid", "n1", _assignment(), lock=True)
    assert not result.ok and "old-uid" in result.reason, result.reason
    pod = scene.pod("p")
    assert "nodeName" not in pod["spec"] and GPU_ASSIGNMENT not in pod["metadata"]["annotations"]
    assert _lock_of(scene) is None


def test_pod_without_gpu_binds_without_lock(
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


def test_lock_of_a_pod_never_bound_there_is_free(scene: Scene, core: client.CoreV1Api) -> None:
    scene.node("n1", gpus=1)
    crashed, fresh = _new_pod(scene, "crashed"), _new_pod(scene, "fresh")
    lock = BindLock.for_pod(scene.ns, "crashed", crashed)
    scene.core.patch_node("n1", {"metadata": {"annotations": {BIND_LOCK: lock.to_annotation()}}})
    assert Binder(core).bind(scene.ns, "fresh", fresh, "n1", _assignment(), lock=True).ok


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
