"""The podgrouper on the real API server, running inside the scheduler with the chart's RBAC: for each kind,
the workload's objects made as its controller makes them (Kubernetes' own controllers really run; the
others are played by the test, `podgrouper_api.py`), and the PodGroup checked as it changes: its
minMember over time, queue and priority class."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.kube.cluster import KubeCluster
from scheduler.kube.podgrouper.kinds import KINDS
from scheduler.kube.podgrouper.names import group_name
from scheduler.kube.podgrouper.owners import OwnerReader
from scheduler.model.parse import parse_pod
from scheduler.model.types import PodInfo
from scheduler.sandbox.controlplane import ControlPlane

# The scene (Tessera installed with the chart's RBAC, its scheduler, a kubelet stand-in) comes with the
# control-plane tests; where they are not there yet, these tests cannot run.
pytest.importorskip(
    "tests.controlplane.scene", reason="tests/controlplane/scene.py (the scene fixtures) is missing"
)
from tests.controlplane.scene import Scene, wait_until
from tests.kube import workloads as wl
from tests.kube.lws_webhook import LwsPodWebhook
from tests.kube.podgrouper_api import RUNNING, Workloads, _gvp, api_version_of, install_crds

pytestmark = pytest.mark.apiserver


@pytest.fixture(scope="session")
def workload_crds(control_plane: ControlPlane) -> None:
    install_crds(control_plane)


@pytest.fixture
def k(scene: Scene, workload_crds: None) -> Iterator[Workloads]:
    scene.scheduler()
    workloads = Workloads(scene.admin, scene.ns)
    yield workloads
    workloads.cleanup()


def spec_of(k: Workloads, owner: dict[str, Any], suffix: str = "") -> dict[str, Any]:
    group = wait_until(lambda: k.group_of(owner, suffix), timeout=15)
    return dict(group["spec"])


def min_member_becomes(k: Workloads, owner: dict[str, Any], n: int, suffix: str = "") -> None:
    def reached() -> bool:
        return k.min_member(owner, suffix) == n

    reached.__name__ = f"minMember of {owner['metadata']['name']}{suffix and '-' + suffix} == {n}"
    wait_until(reached, timeout=15)


# ---- RBAC ------------------------------------------------------------------------------------------------------
def test_chart_rbac_lets_the_scheduler_read_every_known_kind_and_nothing_more(
    scene: Scene, workload_crds: None
) -> None:
    sched = scene.tessera.scheduler_client()
    reader = OwnerReader(sched, watch=False)
    for kind in KINDS:
        api_version = api_version_of(kind.group, kind.kind)
        found = reader(scene.ns, {"apiVersion": api_version, "kind": kind.kind, "name": "absent", "uid": "u"})
        assert found.obj is None and "not found" in found.problem, f"{kind.kind}: {found.problem}"
        if kind.group:  # list and watch, as the owner informers do
            custom = client.CustomObjectsApi(sched)
            custom.list_cluster_custom_object(kind.group, api_version.split("/")[1], kind.plural, limit=1)
    # Not a kind it knows: forbidden (grouped by the owner reference alone).
    found = reader(scene.ns, {"apiVersion": "apps/v1", "kind": "ControllerRevision", "name": "x", "uid": "u"})
    assert found.obj is None and found.problem.startswith("forbidden")
    with pytest.raises(ApiException) as denied:  # read-only
        client.CustomObjectsApi(sched).create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", scene.ns, "jobsets", wl.jobset("no", [wl.replicated_job("w")])
        )
    assert denied.value.status == 403


# ---- built-in kinds (Kubernetes' own controllers make the pods) -------------------------------------------------
def cycle_view(scene: Scene) -> dict[str, PodInfo]:
    """The pods of the test's namespace as the scheduling cycle sees them (the adapter's podgrouper's
    decision travels beside each pod, and the parser applies it)."""
    cluster = KubeCluster(scene.tessera.scheduler_client())
    cluster.writable = False  # a standby: it reads and derives, the running scheduler writes
    cluster.start()
    try:
        assert cluster.wait_synced(10)
        events = cluster.drain_events()
    finally:
        cluster.stop()
    return {
        e.obj["metadata"]["name"]: parse_pod(e.obj, overlay=e.overlay)
        for e in events
        if e.kind == "Pod" and e.obj["metadata"]["namespace"] == scene.ns
    }


def test_deployment_replicas_are_inference_jobs_in_the_deployments_queue(k: Workloads, scene: Scene) -> None:
    k.create(wl.deployment("web", replicas=2, labels={"tessera.dev/queue": "svc"}))
    wait_until(lambda: len(k.pods(app="web")) == 2)
    seen = cycle_view(scene)
    for pod in seen.values():
        assert (pod.queue, pod.priority, pod.preemptible) == ("svc", 125, False)  # inference
        assert pod.group is None
    assert k.podgroups() == {}  # each replica is its own job: no PodGroup object per replica


def test_indexed_job_and_a_cronjob_run(k: Workloads) -> None:
    j = k.create(wl.job("idx", parallelism=3, completions=3, indexed=True, labels={"tessera.dev/queue": "q"}))
    assert spec_of(k, j) == {
        "minMember": 3,
        "queue": "q",
        "priorityClassName": "train",
        "staleGraceSeconds": 60,
    }
    cron = k.create(wl.cronjob("nightly", labels={"tessera.dev/queue": "not-this"},
                               job_labels={"tessera.dev/queue": "batch"}))  # fmt: skip
    # Its schedule never fires during the test: the test plays the CronJob controller.
    k.patch(cron, {"spec": {"suspend": True}})
    run = k.create(wl.cronjob_run(cron, 29000000))
    assert spec_of(k, run)["queue"] == "batch"


def test_a_bad_setting_is_reported_on_the_pod(k: Workloads, scene: Scene) -> None:
    j = k.create(wl.job("bad", 1, annotations={"kai.scheduler/batch-min-member": "two"}))
    (pod,) = wait_until(lambda: k.owned_pods(j))

    def warned() -> list[dict[str, Any]]:
        return [e for e in scene.events_for(pod["metadata"]["name"]) if e["reason"] == "PodGrouperWarning"]

    (event,) = wait_until(warned)
    assert event["type"] == "Warning" and "kai.scheduler/batch-min-member='two'" in event["message"]
    assert spec_of(k, j)["minMember"] == 1


def test_statefulset_parallel_is_a_gang(k: Workloads) -> None:
    sts = k.create(wl.statefulset("ps", 3, parallel=True))
    assert spec_of(k, sts)["minMember"] == 3
    k.patch(sts, {"spec": {"replicas": 2}})  # scaled down: the group follows
    min_member_becomes(k, sts, 2)


# ---- Kubeflow (the test plays the operators; the Job and StatefulSet controllers are real) ----------------------
def test_pytorchjob_elastic_group_follows_its_hpa(k: Workloads) -> None:
    job = k.create(wl.training_job("PyTorchJob", "elastic", {"Worker": 2}, labels={"kai.scheduler/queue": "r"},
                                   spec={"elasticPolicy": {"minReplicas": 2, "maxReplicas": 4}}))  # fmt: skip
    for i in range(2):
        k.create(wl.training_pod(job, "Worker", i))
    assert spec_of(k, job)["minMember"] == 2 and spec_of(k, job)["queue"] == "r"
    # The HPA scales through /scale, raising replicas; an operator raises the floor: the group follows the
    # PyTorchJob's watch event, before and without any new pod.
    k.patch(
        job,
        {"spec": {"elasticPolicy": {"minReplicas": 3}, "pytorchReplicaSpecs": {"Worker": {"replicas": 4}}}},
    )
    min_member_becomes(k, job, 3)


def test_mpijob_launcher_is_counted_once_the_operator_creates_it(k: Workloads) -> None:
    mj = k.create(wl.mpijob("pi", workers=2, wait_for_workers=True))
    workers = [k.create(wl.mpi_worker(mj, i)) for i in range(2)]
    assert spec_of(k, mj)["minMember"] == 2
    for w in workers:
        k.status(w, RUNNING)  # the operator waits for every worker to be Ready
    k.create(wl.mpi_launcher_job(mj))  # the real Job controller makes the launcher pod
    min_member_becomes(k, mj, 3)


def test_notebook_and_trainjob(k: Workloads) -> None:
    nb = k.create(wl.notebook("jupyter", labels={"tessera.dev/queue": "dev"}))
    k.create(wl.notebook_statefulset(nb))  # the real StatefulSet controller makes jupyter-0
    assert spec_of(k, nb) == {
        "minMember": 1,
        "queue": "dev",
        "priorityClassName": "build",
        "staleGraceSeconds": 60,
    }
    tj = k.create(wl.trainjob("llama", labels={"kai.scheduler/queue": "ft"}))
    js = k.create(wl.jobset("llama", [wl.replicated_job("node", replicas=2)], owner=tj))
    for i in range(2):
        k.create(wl.jobset_job(js, "node", i))
    assert (spec_of(k, js)["minMember"], spec_of(k, js)["queue"]) == (2, "ft")


# ---- JobSet, LWS ------------------------------------------------------------------------------------------------
def test_jobset_in_order_min_member_grows_with_each_step(k: Workloads) -> None:
    js = k.create(wl.jobset("ordered", [wl.replicated_job("driver", 1), wl.replicated_job("workers", 2, 2)],
                            in_order=True))  # fmt: skip
    k.create(wl.jobset_job(js, "driver", 0))
    assert spec_of(k, js)["minMember"] == 1
    (driver,) = wait_until(lambda: k.pods(**{"jobset.sigs.k8s.io/replicatedjob-name": "driver"}))
    k.status(driver, RUNNING)
    k.status(js, {"replicatedJobsStatus": [{"name": "driver", "ready": 1, "succeeded": 0, "failed": 0,
                                            "active": 1, "suspended": 0}]})  # fmt: skip
    for i in range(2):
        k.create(wl.jobset_job(js, "workers", i))
    min_member_becomes(k, js, 5)


def test_lws_leader_and_workers_share_a_group_through_the_leader_pod(k: Workloads, scene: Scene) -> None:
    webhook = LwsPodWebhook(scene.cp, f"lws-{scene.ns}").start(scene.ns)
    scene.track("mutatingwebhookconfigurations", webhook.name)
    scene.on_cleanup(webhook.stop)
    lw = k.create(wl.lws("llm", size=3, replicas=2, leader_ready=True, labels={"tessera.dev/queue": "serve"}))
    k.create(wl.lws_leader_statefulset(lw))  # the real StatefulSet controller makes llm-0, llm-1
    leaders = wait_until(
        lambda: len(k.pods(**{wl.WORKER_INDEX: "0"})) == 2 and k.pods(**{wl.WORKER_INDEX: "0"})
    )
    assert spec_of(k, lw, "group-1") == {"minMember": 1, "queue": "serve", "priorityClassName": "train",
                                         "staleGraceSeconds": 60}  # fmt: skip
    leader = next(p for p in leaders if p["metadata"]["labels"][wl.GROUP_INDEX] == "0")
    k.status(leader, RUNNING)  # LeaderReady: the LWS pod controller now makes the workers' StatefulSet
    min_member_becomes(k, lw, 3, "group-0")
    k.create(wl.lws_worker_statefulset(lw, k.get(leader)))
    wait_until(lambda: len(k.pods(**{wl.GROUP_INDEX: "0"})) == 3)
    assert k.min_member(lw, "group-0") == 3 and k.min_member(lw, "group-1") == 1


# ---- Ray, Knative, Argo, Spark ----------------------------------------------------------------------------------
def test_ray_knative_argo_and_spark(k: Workloads, scene: Scene) -> None:
    spec = wl.ray_cluster_spec([{"groupName": "gpu", "replicas": 2, "numOfHosts": 2}])
    svc = k.create(wl.rayservice("serve", spec, labels={"tessera.dev/queue": "ray"}))
    cluster = k.create(wl.raycluster("serve-raycluster-x1", spec, owner=svc))
    k.create(wl.ray_pod(cluster, "head", "headgroup", 0))
    assert (spec_of(k, cluster)["minMember"], spec_of(k, cluster)["queue"]) == (5, "ray")

    ksvc = k.create(wl.kservice("hello", min_scale=2, labels={"tessera.dev/queue": "web"}))
    rev = k.create(wl.krevision(k.create(wl.kconfiguration(ksvc))))
    k.create(wl.krevision_deployment(rev))  # real Deployment and ReplicaSet controllers make the pods
    assert spec_of(k, rev) == {
        "minMember": 2,
        "queue": "web",
        "priorityClassName": "inference",
        "staleGraceSeconds": 60,
    }

    wf = k.create(wl.workflow("wf", labels={"tessera.dev/queue": "ci"}))
    step = k.create(wl.workflow_pod(wf, "step-1"))

    app = k.create(wl.sparkapp("etl", labels={"tessera.dev/queue": "data"}))
    driver = k.create(wl.spark_driver("spark-1f2e", app))
    k.create(wl.spark_executor(driver, 1, app))
    assert spec_of(k, app)["queue"] == "data"
    bare = k.create(wl.spark_driver("spark-9a9a", name="pi"))
    k.create(wl.spark_executor(bare, 1))
    wait_until(lambda: "spark-9a9a" in k.podgroups())
    assert cycle_view(scene)[step["metadata"]["name"]].queue == "ci"


# ---- following the workload ---------------------------------------------------------------------------------------
def test_a_recreated_jobset_gets_a_new_group_and_a_deleted_group_comes_back(k: Workloads) -> None:
    first = k.create(wl.jobset("again", [wl.replicated_job("w", 2)]))
    k.create(wl.jobset_job(first, "w", 0))
    old = wait_until(lambda: k.group_of(first))
    k.delete(first)  # the garbage collector removes its Jobs, pods and PodGroup
    wait_until(lambda: not k.pods() and k.group_of(first) is None, timeout=30)
    second = k.create(wl.jobset("again", [wl.replicated_job("w", 2)]))  # same name, within seconds
    k.create(wl.jobset_job(second, "w", 0))
    new = wait_until(lambda: k.group_of(second))
    assert new["metadata"]["name"] != old["metadata"]["name"]
    assert new["metadata"]["ownerReferences"][0]["uid"] == second["metadata"]["uid"]
    k.custom.delete_namespaced_custom_object("scheduling.tessera.dev", "v1alpha1", k.ns, "podgroups",
                                             new["metadata"]["name"])  # fmt: skip
    wait_until(lambda: (g := k.group_of(second)) and g["metadata"]["uid"] != new["metadata"]["uid"])


def test_every_other_kind_groups_its_pods_under_its_queue(k: Workloads, scene: Scene) -> None:
    """The kinds not covered above, each with the queue label on the workload (which the scheduler may read
    only through the chart's RBAC) and one pod its controller would make."""
    ray_spec = wl.ray_cluster_spec([{"groupName": "g", "replicas": 2}])
    cases: list[tuple[dict[str, Any], int]] = [
        *((wl.training_job(kind, kind.lower(), {"Worker": 2}), 2) for kind in ("TFJob", "XGBoostJob", "JAXJob", "PaddleJob")),
        (wl.rayjob("rj", ray_spec), 3),
        *((wl.obj(api_version_of(g, kind), kind, kind.lower(), spec={}), 1) for g, kind in (
            ("machinelearning.seldon.io", "SeldonDeployment"), ("kubevirt.io", "VirtualMachineInstance"),
            ("workspace.devfile.io", "DevWorkspace"), ("tekton.dev", "PipelineRun"), ("tekton.dev", "TaskRun"),
            ("kubeflow.org", "ScheduledWorkflow"))),
    ]  # fmt: skip
    for body, min_member in cases:
        queue = f"q-{body['kind'].lower()}"
        owner = k.create({**body, "metadata": {**body["metadata"], "labels": {"tessera.dev/queue": queue}}})
        k.create(wl.pod(f"{owner['metadata']['name']}-pod-0", owner=owner))
        assert (spec_of(k, owner)["minMember"], spec_of(k, owner)["queue"]) == (min_member, queue), body[
            "kind"
        ]
    # Kinds skipped to the run they made: a CronWorkflow's Workflow, a ScheduledSparkApplication's application.
    cron_wf = k.create(wl.obj(api_version_of("argoproj.io", "CronWorkflow"), "CronWorkflow", "nightly", spec={},
                              labels={"tessera.dev/queue": "ci"}))  # fmt: skip
    run = k.create(wl.workflow("nightly-1", owner=cron_wf))
    step = k.create(wl.workflow_pod(run, "step"))
    scheduled = k.create(wl.obj(api_version_of("sparkoperator.k8s.io", "ScheduledSparkApplication"),
                                "ScheduledSparkApplication", "daily", spec={}))  # fmt: skip
    app = k.create(wl.sparkapp("daily-1", owner=scheduled, labels={"tessera.dev/queue": "data"}))
    k.create(wl.spark_driver("spark-daily-1", app))
    assert spec_of(k, app)["queue"] == "data"
    # A ReplicaSet of its own (the real ReplicaSet controller makes its pods): one group, minMember 1.
    rs = k.create(wl.obj("apps/v1", "ReplicaSet", "plain", labels={"tessera.dev/queue": "rs"},
                         spec={"replicas": 2, "selector": {"matchLabels": {"app": "plain"}},
                               "template": wl.pod_template({"app": "plain"})}))  # fmt: skip
    assert (spec_of(k, rs)["minMember"], spec_of(k, rs)["queue"]) == (1, "rs")
    assert cycle_view(scene)[step["metadata"]["name"]].queue == "ci"


# ---- kinds above known ones; deletions ----------------------------------------------------------------------------
def test_raycronjob_and_disaggregatedset_are_grouped_as_the_kinds_they_own(
    k: Workloads, scene: Scene
) -> None:
    """Both are read (the chart grants them) and skipped: a RayCronJob's run is its RayJob's gang, a
    DisaggregatedSet's role replica its LeaderWorkerSet's, in the queue labelled on the top kind."""
    spec = wl.ray_cluster_spec([{"groupName": "g", "replicas": 2}])
    cron = k.create(wl.raycronjob("nightly", spec, labels={"tessera.dev/queue": "ray"}))
    run = k.create(wl.raycronjob_run(cron))
    cluster = k.create(wl.raycluster(f"{run['metadata']['name']}-raycluster-x", run["spec"]["rayClusterSpec"],
                                     owner=run))  # fmt: skip
    k.create(wl.ray_pod(cluster, "head", "headgroup", 0))
    assert (spec_of(k, run)["minMember"], spec_of(k, run)["queue"]) == (3, "ray")

    webhook = LwsPodWebhook(scene.cp, f"lws-{scene.ns}").start(scene.ns)
    scene.track("mutatingwebhookconfigurations", webhook.name)
    scene.on_cleanup(webhook.stop)
    ds = k.create(wl.disaggregatedset("pd", {"prefill": (1, 2)}, labels={"tessera.dev/queue": "serve"}))
    lw = k.create(wl.disaggregated_lws(ds, "prefill"))
    k.create(wl.lws_leader_statefulset(lw))  # the real StatefulSet controller makes the leader pod
    assert spec_of(k, lw, "group-0") == {"minMember": 2, "queue": "serve", "priorityClassName": "train",
                                         "staleGraceSeconds": 60}  # fmt: skip


def test_a_refused_owner_above_a_jobset_keeps_the_gang_and_tells_the_pod(k: Workloads, scene: Scene) -> None:
    """An operator's kind the chart grants no read of (tests/kube/crds/: Pipeline) owns a JobSet: the walk
    stops on it, the JobSet below is the top owner (its gang of 2), and each pod gets a PodGrouperWarning."""
    pipeline = dict(k.custom.create_namespaced_custom_object(
        "workflows.example.dev", "v1", k.ns, "pipelines",
        {"apiVersion": "workflows.example.dev/v1", "kind": "Pipeline", "metadata": {"name": "etl"}, "spec": {}}))  # fmt: skip
    js = k.create(wl.jobset("train", [wl.replicated_job("w", 1, 2)], owner=pipeline))
    k.create(wl.jobset_job(js, "w", 0))  # the real Job controller makes its 2 pods
    assert spec_of(k, js)["minMember"] == 2
    pod = wait_until(lambda: next(iter(k.pods()), None))

    def warned() -> list[dict[str, Any]]:
        return [e for e in scene.events_for(pod["metadata"]["name"]) if e["reason"] == "PodGrouperWarning"]

    (event,) = wait_until(warned)
    assert "could not read Pipeline etl: forbidden" in event["message"]
    assert "grouped as the JobSet below it" in event["message"]


def test_a_jobset_deleted_in_the_background_does_not_bring_its_podgroup_back(k: Workloads) -> None:
    """The garbage collector deletes the JobSet's PodGroup (its owner is gone) while the pods still live:
    they go only after their Job, held here by a finalizer as a slow Job deletion would hold it. The
    podgrouper must not make the PodGroup again for a JobSet that is gone (it did, and the collector then
    deleted that one too)."""
    js = k.create(wl.jobset("bg", [wl.replicated_job("w", 1, 2)]))
    body = wl.jobset_job(js, "w", 0)
    body["metadata"]["finalizers"] = ["tessera.dev/test-hold"]
    job = k.create(body)
    group = wait_until(lambda: k.group_of(js), timeout=15)
    wait_until(lambda: len(k.pods()) == 2)
    name = group["metadata"]["name"]
    batch = client.BatchV1Api(k.core.api_client)
    try:
        k.delete(js)  # propagation Background, as kubectl's default
        uids: list[str | None] = []  # the PodGroup's uid, every 50 ms (None: none)

        def seen() -> str | None:
            uids.append((k.podgroups().get(name) or {}).get("metadata", {}).get("uid"))
            return uids[-1]

        wait_until(lambda: seen() is None, timeout=60)  # the collector deleted it
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # and nothing makes it again
            seen()
            time.sleep(0.05)
        assert set(uids) <= {group["metadata"]["uid"], None} and uids[-1] is None, set(uids)
        assert len(k.pods()) == 2  # the pods lived on all along
    finally:
        batch.patch_namespaced_job(job["metadata"]["name"], k.ns, {"metadata": {"finalizers": None}})
    wait_until(lambda: not k.pods() and k.group_of(js) is None, timeout=30)


def test_an_orphaned_jobsets_podgroup_goes_with_its_jobs(k: Workloads) -> None:
    """`--cascade=orphan`: the JobSet goes, its Job and pods stay and so does the PodGroup, whose owner
    reference the collector removed. The podgrouper gives it the Job as owner (the pods keep their group),
    so deleting the Job deletes it; before, it stayed for ever."""
    js = k.create(wl.jobset("orphan", [wl.replicated_job("w", 1, 2)]))
    job = k.create(wl.jobset_job(js, "w", 0))
    group = wait_until(lambda: k.group_of(js), timeout=15)
    group_, version, plural = _gvp(js)
    k.custom.delete_namespaced_custom_object(group_, version, k.ns, plural, js["metadata"]["name"],
                                             propagation_policy="Orphan")  # fmt: skip

    def owned_by_the_job() -> bool:
        g = k.podgroups().get(group["metadata"]["name"])
        refs = (g or {}).get("metadata", {}).get("ownerReferences") or []
        return [r["uid"] for r in refs] == [job["metadata"]["uid"]]

    wait_until(owned_by_the_job, timeout=30)
    client.BatchV1Api(k.core.api_client).delete_namespaced_job(
        job["metadata"]["name"], k.ns, propagation_policy="Background"
    )
    wait_until(lambda: group["metadata"]["name"] not in k.podgroups(), timeout=30)


def test_bare_pods_get_a_podgroup_object_owned_by_the_pod(k: Workloads) -> None:
    """As KAI's podgrouper does: one PodGroup per bare pod, minMember 1, in the pod's queue, owned by the
    pod, so deleting the pod deletes it."""
    pod = k.create(wl.pod("lonely", labels={"tessera.dev/queue": "solo"}))
    name = group_name("lonely", pod["metadata"]["uid"])
    group = wait_until(lambda: k.podgroups().get(name), timeout=15)
    assert (group["spec"]["minMember"], group["spec"]["queue"]) == (1, "solo")
    # Labelled as a record: the scheduler's own PodGroup watch leaves it out (the pod is its own job).
    assert group["metadata"]["labels"] == {"tessera.dev/pod-record": "true"}
    (ref,) = group["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["uid"]) == ("Pod", pod["metadata"]["uid"])
    # Said later, a preemptibility needs a real group (a pod cannot carry it): the record becomes it.
    k.core.patch_namespaced_pod(
        "lonely", k.ns, {"metadata": {"labels": {"kai.scheduler/preemptibility": "preemptible"}}}
    )

    def real() -> dict[str, Any] | None:
        g = k.podgroups().get(name) or {}
        return g if not g.get("metadata", {}).get("labels") and g["spec"].get("preemptibility") else None

    assert wait_until(real, timeout=15)["spec"]["preemptibility"] == "preemptible"
    k.core.delete_namespaced_pod("lonely", k.ns, grace_period_seconds=0)
    wait_until(lambda: name not in k.podgroups(), timeout=30)
