"""Binder, evictor, status writers and events against the fake API server."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from scheduler.api.assignment import AssignedGPU, GPUAssignment
from scheduler.api.bind_lock import BindLock
from scheduler.api.keys import BIND_LOCK, GPU_ALLOCATED, GPU_ASSIGNMENT
from scheduler.api.meta import Condition
from scheduler.api.podgroup import PodGroupStatus
from scheduler.api.queue import QueueStatus
from scheduler.kube.binder import Binder
from scheduler.kube.evictor import Evictor
from scheduler.kube.recorder import EventRecorder, ObjectRef
from scheduler.kube.status import PendingPodReporter, PodGroupStatusWriter, QueueStatusWriter
from tests.fakes.kubeapi import FakeKubeAPI
from tests.kube.helpers import node_body, pod_body


@pytest.fixture
def core(kube_api: FakeKubeAPI) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api.client())


def _assignment(node: str = "n1", milli: int = 500) -> GPUAssignment:
    return GPUAssignment(node=node, gpus=[AssignedGPU(index=0, uuid="GPU-0", milli=milli, memory_mib=40960)])


def _new_pod(kube_api: FakeKubeAPI, name: str, **kw: object) -> str:
    return str(kube_api.seed(pod_body(name, annotations={"gpu-fraction": "0.5"}, **kw))["metadata"]["uid"])  # type: ignore[arg-type]


def test_bind_writes_assignment_takes_lock_then_binds(kube_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    kube_api.seed(node_body("n1", gpus=1))
    uid = _new_pod(kube_api, "p")
    result = Binder(core).bind("default", "p", uid, "n1", _assignment())
    assert result.ok, result.reason
    pod = kube_api.get("pods", "p")
    assert pod["spec"]["nodeName"] == "n1"
    assert GPUAssignment.from_annotation(pod["metadata"]["annotations"][GPU_ASSIGNMENT]).gpus[0].milli == 500
    assert pod["metadata"]["annotations"]["gpu-fraction"] == "0.5"  # other annotations kept
    lock = BindLock.from_annotation(kube_api.get("nodes", "n1")["metadata"]["annotations"][BIND_LOCK])
    assert (lock.uid, lock.namespace, lock.name) == (uid, "default", "p")
    writes = [
        (r.method, r.path.rsplit("/", 1)[-1]) for r in kube_api.requests if r.method in ("PATCH", "POST")
    ]
    assert writes == [("PATCH", "p"), ("PATCH", "n1"), ("POST", "binding")]


def test_second_pod_waits_for_the_device_plugin_then_proceeds(
    kube_api: FakeKubeAPI, core: client.CoreV1Api
) -> None:
    kube_api.seed(node_body("n1", gpus=1))
    first, second = _new_pod(kube_api, "a"), _new_pod(kube_api, "b")
    binder = Binder(core)
    assert binder.bind("default", "a", first, "n1", _assignment()).ok
    blocked = binder.bind("default", "b", second, "n1", _assignment())
    assert (
        not blocked.ok
        and blocked.retry
        and "waiting for the device plugin to allocate default/a" in blocked.reason
    )
    assert GPU_ASSIGNMENT not in kube_api.get("pods", "b")["metadata"]["annotations"]  # rolled back
    # The device plugin served a: it marks the pod; the lock is then free for b.
    kube_api.modify("pods", "a", lambda p: p["metadata"]["annotations"].update({GPU_ALLOCATED: "true"}))
    assert binder.bind("default", "b", second, "n1", _assignment()).ok


def test_stale_lock_times_out(kube_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    kube_api.seed(node_body("n1", gpus=1))
    first, second = _new_pod(kube_api, "a"), _new_pod(kube_api, "b")
    assert Binder(core).bind("default", "a", first, "n1", _assignment()).ok
    later = Binder(core, lock_timeout_s=30, clock=lambda: datetime.now(UTC) + timedelta(seconds=31))
    assert later.bind("default", "b", second, "n1", _assignment()).ok


def test_failed_binding_rolls_back_lock_and_annotation(kube_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    kube_api.seed(node_body("n1", gpus=1))
    uid = _new_pod(kube_api, "p")
    kube_api.fail_next("POST", r"/pods/p/binding$", code=500, message="etcd timeout")
    result = Binder(core).bind("default", "p", uid, "n1", _assignment())
    assert not result.ok and result.retry and "etcd timeout" in result.reason
    pod = kube_api.get("pods", "p")
    assert "nodeName" not in pod["spec"] and GPU_ASSIGNMENT not in pod["metadata"]["annotations"]
    assert BIND_LOCK not in (kube_api.get("nodes", "n1")["metadata"].get("annotations") or {})


def test_bind_of_a_replaced_pod_is_refused(kube_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    kube_api.seed(node_body("n1", gpus=1))
    _new_pod(kube_api, "p")
    result = Binder(core).bind("default", "p", "old-uid", "n1", _assignment())
    assert not result.ok and "uid changed" in result.reason
    assert BIND_LOCK not in (kube_api.get("nodes", "n1")["metadata"].get("annotations") or {})


def test_pod_without_gpu_binds_without_lock(kube_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    kube_api.seed(node_body("n1"))
    uid = str(kube_api.seed(pod_body("cpu"))["metadata"]["uid"])
    assert Binder(core).bind("default", "cpu", uid, "n1", None).ok
    assert kube_api.get("pods", "cpu")["spec"]["nodeName"] == "n1"
    assert not kube_api.requests_matching("PATCH")


MSG = "reclaim: evicted to make room for team-b/trainer-0 (queue team-b below its fair share)"


def test_eviction_with_event_and_pdb_refusal(kube_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    uid = str(kube_api.seed(pod_body("victim", node="n1"))["metadata"]["uid"])
    evictor = Evictor(core, EventRecorder(core))
    kube_api.refuse_evictions(name="victim", times=1)
    refused = evictor.evict("default", "victim", uid, "reclaim", MSG)
    assert not refused.ok and "disruption budget" in refused.reason
    assert kube_api.find("pods", "victim") is not None
    done = evictor.evict("default", "victim", uid, "reclaim", MSG)
    assert done.ok and kube_api.find("pods", "victim") is None
    reasons = {e["reason"]: e["message"] for e in kube_api.events_for("victim")}
    assert reasons["Reclaimed"] == MSG
    assert "was refused" in reasons["EvictionRefused"]
    body = kube_api.requests_matching("POST", "/eviction$")[-1].body
    assert body["deleteOptions"]["preconditions"]["uid"] == uid
    assert evictor.evict("default", "victim", uid, "preempt", "").ok  # already gone


def test_recorder_aggregates_and_rate_limits(kube_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    now = [0.0]
    recorder = EventRecorder(core, min_interval_s=30, clock=lambda: now[0])
    ref = ObjectRef("Pod", "default", "p", "uid-1")
    assert recorder.record(ref, "FailedScheduling", "no GPU", rate_limited=True)
    assert not recorder.record(ref, "FailedScheduling", "no GPU", rate_limited=True)
    now[0] = 31
    assert recorder.record(ref, "FailedScheduling", "no GPU", rate_limited=True)
    assert recorder.record(ref, "FailedScheduling", "queue over limit", rate_limited=True)
    events = kube_api.events_for("p")
    assert sorted((e["message"], e["count"]) for e in events) == [("no GPU", 2), ("queue over limit", 1)]
    assert all(e["source"]["component"] == "tessera" for e in events)


def test_status_writers_skip_unchanged(kube_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    custom = client.CustomObjectsApi(kube_api.client())
    kube_api.seed(
        {
            "apiVersion": "scheduling.tessera.dev/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"minMember": 2},
        }
    )
    kube_api.seed(
        {"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "q"}}
    )
    pg = PodGroupStatusWriter(custom)
    why = Condition(
        type="Schedulable",
        status="False",
        reason="GangUnschedulable",
        message="gang needs 2 pods with 1 GPU each; only 1 fits",
    )
    assert pg.write("default", "g", PodGroupStatus(phase="Unschedulable", running=0, conditions=[why]))
    assert not pg.write("default", "g", PodGroupStatus(phase="Unschedulable", running=0, conditions=[why]))
    status = kube_api.get("podgroups", "g")["status"]
    assert status["phase"] == "Unschedulable" and status["conditions"][0]["reason"] == "GangUnschedulable"
    assert status["conditions"][0]["lastTransitionTime"]
    assert "only 1 fits" in status["conditions"][0]["message"]
    qs = QueueStatusWriter(custom)
    qstatus = QueueStatus(allocated={"gpu": 1.5}, requested={"gpu": 3}, fair_share={"gpu": 2})
    assert qs.write("q", qstatus)
    assert not qs.write("q", qstatus.model_copy())
    assert kube_api.get("queues", "q")["status"] == {
        "allocated": {"gpu": 1.5},
        "requested": {"gpu": 3},
        "fairShare": {"gpu": 2},
    }
    uid = str(kube_api.seed(pod_body("p"))["metadata"]["uid"])
    kube_api.modify(
        "pods",
        "p",
        lambda p: p.setdefault("status", {}).update(conditions=[{"type": "Initialized", "status": "True"}]),
    )
    reporter = PendingPodReporter(core, EventRecorder(core))
    reporter.unschedulable("default", "p", uid, "0/3 nodes have 0.5 GPU free")
    reporter.unschedulable("default", "p", uid, "0/3 nodes have 0.5 GPU free")
    reporter.unschedulable("default", "p", uid, 'gpu-fraction="2" is invalid', reason="InvalidRequest")
    conditions = {c["type"]: c for c in kube_api.get("pods", "p")["status"]["conditions"]}
    assert conditions["PodScheduled"]["message"] == 'InvalidRequest: gpu-fraction="2" is invalid'
    assert conditions["PodScheduled"]["reason"] == "Unschedulable" and "Initialized" in conditions
    assert len(kube_api.requests_matching("PATCH", "/pods/p/status$")) == 2
    assert sorted(e["reason"] for e in kube_api.events_for("p")) == ["FailedScheduling", "InvalidRequest"]
    assert json.dumps(kube_api.events_for("p")[0]["involvedObject"]["uid"]) == json.dumps(uid)


def test_lock_of_a_pod_never_bound_there_is_free(kube_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    kube_api.seed(node_body("n1", gpus=1))
    crashed, fresh = _new_pod(kube_api, "crashed"), _new_pod(kube_api, "fresh")
    lock = BindLock.for_pod("default", "crashed", crashed)
    kube_api.modify(
        "nodes", "n1", lambda n: n["metadata"].update(annotations={BIND_LOCK: lock.to_annotation()})
    )
    assert Binder(core).bind("default", "fresh", fresh, "n1", _assignment()).ok
