"""Every gang the old podgrouper made that could never start (or that stale-gang eviction broke up), run to
the end on the real API server: the scheduler with the chart's RBAC, a kubelet stand-in that runs what is
bound, Kubernetes' own Job/StatefulSet controllers, and the test playing the workload's operator in its
order (a JobSet's next step once the previous one is ready, an LWS's workers once the leader is Ready ...).
Each test waits with a deadline: before, it hung there ("gang ... needs 5 pods; only 1 exist"), or saw
its running pods evicted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler.sandbox.controlplane import ControlPlane

# The scene (Tessera installed with the chart's RBAC, its scheduler, a kubelet stand-in) comes with the
# control-plane tests; where they are not there yet, these tests cannot run.
pytest.importorskip(
    "tests.controlplane.scene", reason="tests/controlplane/scene.py (the scene fixtures) is missing"
)
from tests.controlplane.scene import Scene, wait_until
from tests.kube import workloads as wl
from tests.kube.lws_webhook import LwsPodWebhook
from tests.kube.podgrouper_api import Workloads, install_crds

pytestmark = pytest.mark.apiserver

SUCCEEDED = {"phase": "Succeeded", "conditions": [{"type": "Ready", "status": "False"}]}
FAST_STALE = {"kai.scheduler/staleness-grace-period": "1s"}  # stale-gang eviction would strike within seconds


@pytest.fixture(scope="session")
def workload_crds(control_plane: ControlPlane) -> None:
    install_crds(control_plane)


@pytest.fixture
def k(scene: Scene, workload_crds: None) -> Iterator[Workloads]:
    scene.node("node-a", cpu="64", memory="256Gi")
    scene.kubelet()
    scene.scheduler()
    workloads = Workloads(scene.admin, scene.ns)
    yield workloads
    workloads.cleanup()


def running(k: Workloads, pods: list[dict[str, Any]]) -> bool:
    """All these pods are bound and Running (the kubelet stand-in started them)."""
    fresh = [k.get(p) for p in pods]
    return all(p["spec"].get("nodeName") and p["status"].get("phase") == "Running" for p in fresh)


def wait_running(k: Workloads, n: int, **labels: str) -> list[dict[str, Any]]:
    def started() -> list[dict[str, Any]] | None:
        pods = [p for p in k.pods(**labels) if not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) == n and running(k, pods) else None

    started.__name__ = f"{n} pods {labels or ''} bound and running"
    return list(wait_until(started, timeout=30))


def finish(k: Workloads, pods: list[dict[str, Any]]) -> None:
    for p in pods:
        k.status(p, SUCCEEDED)  # the containers exited 0


def job_done(k: Workloads, job: dict[str, Any]) -> bool:
    conditions = (k.get(job).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


def never_evicted(k: Workloads, pods: list[dict[str, Any]], seconds: float) -> None:
    """Over `seconds`, none of `pods` is evicted (stale-gang would have done it within its 1 s grace)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for p in pods:
            now = k.find(p)
            assert now and not now["metadata"].get("deletionTimestamp"), (
                f"{p['metadata']['name']} was evicted"
            )
        time.sleep(0.2)


# ---- LeaderWorkerSet ------------------------------------------------------------------------------------------------
def lws_world(scene: Scene) -> None:
    webhook = LwsPodWebhook(scene.cp, f"lws-{scene.ns}").start(scene.ns)
    scene.track("mutatingwebhookconfigurations", webhook.name)
    scene.on_cleanup(webhook.stop)


def test_lws_leader_and_workers_start_together(k: Workloads, scene: Scene) -> None:
    """Before: the walk stopped at the leader Pod (a core-group owner), the workers formed groups of their own
    and the leader waited alone in a group of minMember 3, for ever."""
    lws_world(scene)
    lw = k.create(wl.lws("llm", size=3))
    k.create(wl.lws_leader_statefulset(lw))
    (leader,) = wait_until(lambda: k.pods(**{wl.WORKER_INDEX: "0"}))
    k.create(wl.lws_worker_statefulset(lw, k.get(leader)))  # LeaderCreated: workers as soon as it exists
    wait_running(k, 3, **{wl.GROUP_INDEX: "0"})
    k.delete(lw)  # a serving workload ends when it is deleted: everything goes with it
    # (by the garbage collector, which learns a kind installed by a CRD at its next discovery sync, every
    # 30 s: run first in a session, right after the CRDs, the LeaderWorkerSet's deletion waits for it)
    wait_until(lambda: not k.pods() and not k.podgroups(), timeout=75)


def test_lws_leader_ready_starts_the_leader_first(k: Workloads, scene: Scene) -> None:
    """Before: minMember 3 counted workers that LWS creates only once the leader is Ready."""
    lws_world(scene)
    lw = k.create(wl.lws("ready", size=3, leader_ready=True))
    k.create(wl.lws_leader_statefulset(lw))
    (leader,) = wait_running(k, 1, **{wl.WORKER_INDEX: "0"})
    k.create(wl.lws_worker_statefulset(lw, k.get(leader)))  # the leader is Ready (the kubelet said so)
    wait_running(k, 3, **{wl.GROUP_INDEX: "0"})


# ---- JobSet and TrainJob ----------------------------------------------------------------------------------------------
def jobset_status(k: Workloads, js: dict[str, Any]) -> None:
    """The JobSet controller's replicatedJobsStatus, from its Jobs' status (kept by the real Job controller)."""
    counts: dict[str, dict[str, int]] = {}
    jobs = k.custom.list_namespaced_custom_object("batch", "v1", k.ns, "jobs")["items"]
    for job in jobs:
        rj = job["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
        c = counts.setdefault(rj, {"ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0})
        status, want = job.get("status") or {}, job["spec"]["parallelism"]
        done = any(x["type"] == "Complete" and x["status"] == "True" for x in status.get("conditions") or [])
        c["succeeded" if done else "active"] += 1
        if not done and status.get("ready", 0) + status.get("succeeded", 0) >= want:
            c["ready"] += 1
    k.status(js, {"replicatedJobsStatus": [{"name": n, **c} for n, c in counts.items()]})


def step_ready(k: Workloads, js: dict[str, Any], rj: str, replicas: int, key: str = "ready") -> bool:
    jobset_status(k, js)
    statuses = (k.get(js).get("status") or {}).get("replicatedJobsStatus") or []
    return any(s["name"] == rj and s[key] == replicas for s in statuses)


def test_jobset_in_order_runs_step_by_step(k: Workloads) -> None:
    """Before: minMember 5 while InOrder creates only the driver first: "needs 5 pods; only 1 exist"."""
    js = k.create(wl.jobset("ordered", [wl.replicated_job("driver", 1), wl.replicated_job("workers", 2, 2)],
                            in_order=True, annotations=FAST_STALE))  # fmt: skip
    k.create(wl.jobset_job(js, "driver", 0))
    (driver,) = wait_running(k, 1, **{"jobset.sigs.k8s.io/replicatedjob-name": "driver"})
    wait_until(lambda: step_ready(k, js, "driver", 1), timeout=30)
    jobs = [k.create(wl.jobset_job(js, "workers", i)) for i in range(2)]
    workers = wait_running(k, 4, **{"jobset.sigs.k8s.io/replicatedjob-name": "workers"})
    finish(k, [*workers, driver])
    wait_until(lambda: all(job_done(k, j) for j in jobs), timeout=30)


def test_jobset_initializers_then_nodes(k: Workloads) -> None:
    """The JobSet of a Trainer torchtune runtime: the nodes depend on both initializers being Complete.
    Before: minMember 5 with the 2 initializer pods, and the nodes come only after those have finished."""
    js = k.create(wl.jobset("tune", [
        wl.replicated_job("dataset-initializer"), wl.replicated_job("model-initializer"),
        wl.replicated_job("node", 3, depends_on=[("dataset-initializer", "Complete"), ("model-initializer", "Complete")]),
    ]))  # fmt: skip
    for rj in ("dataset-initializer", "model-initializer"):
        k.create(wl.jobset_job(js, rj, 0))
    initializers = wait_running(k, 2)
    finish(k, initializers)
    for rj in ("dataset-initializer", "model-initializer"):
        wait_until(lambda rj=rj: step_ready(k, js, rj, 1, key="succeeded"), timeout=30)
    jobs = [k.create(wl.jobset_job(js, "node", i)) for i in range(3)]
    nodes = wait_running(k, 3, **{"jobset.sigs.k8s.io/replicatedjob-name": "node"})
    finish(k, nodes)
    wait_until(lambda: all(job_done(k, j) for j in jobs), timeout=30)


# ---- MPIJob -----------------------------------------------------------------------------------------------------------
def test_mpijob_wait_for_workers_ready(k: Workloads) -> None:
    """Before: minMember 3 counted the launcher, which the operator creates once both workers are Ready."""
    mj = k.create(wl.mpijob("pi", workers=2, wait_for_workers=True))
    workers = [k.create(wl.mpi_worker(mj, i)) for i in range(2)]
    wait_until(lambda: running(k, workers), timeout=30)
    launcher = k.create(wl.mpi_launcher_job(mj))
    (launcher_pod,) = wait_running(k, 1, **{"training.kubeflow.org/job-role": "launcher"})
    finish(k, [launcher_pod])
    wait_until(lambda: job_done(k, launcher), timeout=30)


# ---- stale-gang eviction --------------------------------------------------------------------------------------------------
def test_a_member_that_finished_first_still_counts(k: Workloads) -> None:
    """A PyTorchJob's worker exits before its master. Before: the finished pod lost its group, stale-gang
    eviction saw "ran 1 of 2 members" and evicted the master still running."""
    job = k.create(wl.training_job("PyTorchJob", "ddp", {"Master": 1, "Worker": 1}))
    master, worker = k.create(wl.training_pod(job, "Master", 0)), k.create(wl.training_pod(job, "Worker", 0))
    wait_until(lambda: running(k, [master, worker]), timeout=30)
    (group,) = k.podgroups()  # an operator shortens the grace period: stale-gang would strike within a second
    k.custom.patch_namespaced_custom_object("scheduling.tessera.dev", "v1alpha1", k.ns, "podgroups", group,
                                            {"spec": {"staleGraceSeconds": 1}})  # fmt: skip
    finish(k, [worker])
    never_evicted(k, [master], seconds=4)
    finish(k, [master])


def test_a_raycluster_scaled_down_keeps_running(k: Workloads) -> None:
    """A replica edit (here KubeRay's autoscaler-free path: replicas 3 -> 1, two workers deleted). Before: the
    PodGroup kept minMember 4, and stale-gang eviction took the head and the last worker."""
    spec = wl.ray_cluster_spec([{"groupName": "g", "replicas": 3}])
    rc = k.create(wl.raycluster("rc", spec, annotations=FAST_STALE))
    pods = [k.create(wl.ray_pod(rc, "head", "headgroup", 0))] + [
        k.create(wl.ray_pod(rc, "worker", "g", i)) for i in range(3)
    ]
    wait_until(lambda: running(k, pods), timeout=30)
    k.patch(rc, {"spec": {"workerGroupSpecs": [{**spec["workerGroupSpecs"][0], "replicas": 1}]}})
    for p in pods[2:]:
        k.delete(p)
    wait_until(lambda: k.min_member(rc) == 2)
    never_evicted(k, pods[:2], seconds=4)
