"""Podgrouper rules per kind, over the objects exactly as each controller makes them (`workloads.py`), kept
in memory; the same workloads run against the real API server in test_kube_podgrouper_apiserver.py."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.kube.event_queue import ResourceEvent
from scheduler.kube.podgrouper.book import Decision
from scheduler.kube.podgrouper.names import group_name
from scheduler.kube.podgrouper.owners import matters
from scheduler.kube.podgrouper.reconciler import patch_for
from tests.kube import workloads as wl
from tests.kube.podgrouper_store import Store

READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
SUCCEEDED = {"phase": "Succeeded"}


@pytest.fixture
def k() -> Store:
    return Store()


def pods(k: Store, *bodies: dict[str, Any]) -> list[dict[str, Any]]:
    """Create the pods and let the podgrouper see each, in order."""
    out = []
    for body in bodies:
        p = k.add(body)
        k.observe(p)
        out.append(p)
    return out


# ---- built-in kinds ------------------------------------------------------------------------------------------
def test_bare_pod_is_its_own_job_unless_it_says_more(k: Store) -> None:
    (plain,) = pods(k, wl.pod("plain", labels={"tessera.dev/queue": "team-a"}))
    assert k.observe(plain).group is None  # a group would say what the pod says: the pod is its own job
    # ... but, as KAI's podgrouper does, a bare pod's group is written as an object (owned by the pod, so
    # it goes with it), for tools that list PodGroups.
    record = k.observe(plain).record
    assert record is not None and record.owner is not None
    assert (record.name, record.min_member, record.queue) == (
        group_name("plain", plain["metadata"]["uid"]),
        1,
        "team-a",
    )
    assert (record.owner.kind, record.owner.uid) == ("Pod", plain["metadata"]["uid"])
    (marked,) = pods(k, wl.pod("marked", labels={"kai.scheduler/preemptibility": "non-preemptible"}))
    g = k.spec(marked)
    assert (g.min_member, g.preemptibility, g.priority_class) == (1, "non-preemptible", "train")
    assert g.owner is not None and g.owner.kind == "Pod" and g.name == group_name("marked", g.owner.uid)


def test_deployment_pods_are_their_own_jobs_with_inference_priority_and_the_deployments_queue(
    k: Store,
) -> None:
    """KAI makes one group per replica, owned by the pod; here a replica is its own job and the group's
    queue and priority class are put on the pod the cycle sees (no PodGroup object per replica)."""
    dep = k.add(wl.deployment("web", labels={"kai.scheduler/queue": "svc"}))
    rs = k.add(wl.replicaset(dep))
    a, b = k.add(wl.replicaset_pod(rs, "a1")), k.add(wl.replicaset_pod(rs, "b2", priority_class="build"))
    da, db = k.observe(a), k.observe(b)
    assert (da.group, da.queue, da.priority_class) == (None, "svc", "inference")
    assert (db.group, db.queue, db.priority_class) == (None, "svc", None)  # its own class: nothing to change
    preempt = k.add(wl.deployment("batchy", labels={"kai.scheduler/preemptibility": "preemptible"}))
    (c,) = pods(k, wl.replicaset_pod(k.add(wl.replicaset(preempt)), "c3"))
    g = k.spec(c)  # a pod cannot say preemptible on its own: the group object carries it
    assert (g.min_member, g.preemptibility, g.owner and g.owner.uid) == (
        1,
        "preemptible",
        c["metadata"]["uid"],
    )


def test_priority_class_label_on_an_owner_wins_and_an_unknown_class_is_reported(k: Store) -> None:
    dep = k.add(wl.deployment("web", labels={"priorityClassName": "build-preemptible"}))
    rs = k.add(wl.replicaset(dep))
    p = k.add(wl.replicaset_pod(rs, "a1", priority_class="inference"))
    assert k.observe(p).priority_class == "build-preemptible"
    dep2 = k.add(wl.deployment("api", labels={"priorityClassName": "no-such-class"}))
    q = k.add(wl.replicaset_pod(k.add(wl.replicaset(dep2)), "c3"))
    decision = k.observe(q)
    assert decision.priority_class == "inference" and "no-such-class" in decision.warnings[0]
    assert k.observe(q).warnings == ()  # reported once


def test_statefulset_is_a_gang_only_when_its_pods_start_together(k: Store) -> None:
    ordered, parallel = k.add(wl.statefulset("db", 3)), k.add(wl.statefulset("ps", 3, parallel=True))
    (o0,) = pods(k, wl.statefulset_pod(ordered, 0))
    (p0,) = pods(k, wl.statefulset_pod(parallel, 0))
    assert k.spec(o0).min_member == 1 and k.spec(p0).min_member == 3


@pytest.mark.parametrize(
    ("parallelism", "completions", "indexed", "expected"),
    [(4, None, False, 1), (4, 4, True, 4), (8, 2, True, 2), (4, 6, False, 1)],
)
def test_job(k: Store, parallelism: int, completions: int | None, indexed: bool, expected: int) -> None:
    j = k.add(wl.job("train", parallelism, completions, indexed, template_labels={"tessera.dev/queue": "q"}))
    (p,) = pods(k, wl.job_pod(j))
    assert (k.spec(p).min_member, k.spec(p).queue) == (expected, "q")


def test_indexed_job_asks_only_for_the_completions_left(k: Store) -> None:
    """completions 5, parallelism 4: once 4 indexes succeeded, the last pod must not wait for 3 more."""
    j = k.add(wl.job("sweep", parallelism=4, completions=5, indexed=True))
    first = pods(k, *(wl.job_pod(j, i) for i in range(4)))
    assert k.spec(first[0]).min_member == 4
    for p in first:
        k.update(p, status=SUCCEEDED)
        k.observe(p)
    k.update(j, status={"succeeded": 4})
    k.changed(j)
    (last,) = pods(k, wl.job_pod(j, 4))
    assert k.spec(last).min_member == 1
    assert k.observe(first[0]).group == k.observe(last).group  # finished members keep their group


def test_batch_min_member_on_a_job_and_a_bad_value_reported(k: Store) -> None:
    j = k.add(wl.job("mm", 4, annotations={"kai.scheduler/batch-min-member": "3"}))
    (p,) = pods(k, wl.job_pod(j))
    assert k.spec(p).min_member == 3
    bad = k.add(wl.job("bad", 4, annotations={"kai.scheduler/batch-min-member": "three"}))
    (q,) = pods(k, wl.job_pod(bad))
    assert k.spec(q).min_member == 1 and "must be a positive integer" in k.spec(q).warnings[0]


def test_cronjob_run_is_grouped_by_its_job_with_the_job_templates_queue(k: Store) -> None:
    cron = k.add(
        wl.cronjob("nightly", labels={"tessera.dev/queue": "wrong"}, job_labels={"tessera.dev/queue": "batch"},
                   job_annotations={"kai.scheduler/batch-min-member": "1"})
    )  # fmt: skip
    run1, run2 = k.add(wl.cronjob_run(cron, 1000)), k.add(wl.cronjob_run(cron, 1005))
    p1, p2 = pods(k, wl.job_pod(run1), wl.job_pod(run2))
    g1, g2 = k.spec(p1), k.spec(p2)
    assert g1.name != g2.name and g1.queue == g2.queue == "batch"
    assert g1.owner is not None and (g1.owner.kind, g1.owner.name) == ("Job", "nightly-1000")


# ---- Kubeflow --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["PyTorchJob", "TFJob", "XGBoostJob", "JAXJob", "PaddleJob"])
def test_training_operator_jobs(k: Store, kind: str) -> None:
    j = k.add(wl.training_job(kind, "dist", {"Master": 1, "Worker": 3}, labels={"kai.scheduler/queue": "r"}))
    (p,) = pods(k, wl.training_pod(j, "Worker", 0))
    g = k.spec(p)
    assert (g.min_member, g.queue, g.priority_class, g.owner and g.owner.kind) == (4, "r", "train", kind)


def test_scheduling_policy_and_elastic_pytorchjob(k: Store) -> None:
    policy = {
        "runPolicy": {"schedulingPolicy": {"minAvailable": 2, "queue": "research", "priorityClass": "build"}}
    }
    j = k.add(wl.training_job("TFJob", "tf", {"Chief": 1, "Worker": 3}, spec=policy))
    (p,) = pods(k, wl.training_pod(j, "Worker", 1))
    assert (k.spec(p).min_member, k.spec(p).queue, k.spec(p).priority_class) == (2, "research", "build")
    elastic = {"elasticPolicy": {"minReplicas": 2, "maxReplicas": 8}}
    e = k.add(wl.training_job("PyTorchJob", "elastic", {"Worker": 4}, spec=elastic))
    (w0,) = pods(k, wl.training_pod(e, "Worker", 0))
    assert k.spec(w0).min_member == 2
    both = k.add(wl.training_job("PyTorchJob", "both", {"Worker": 4},
                                 spec={**elastic, "runPolicy": {"schedulingPolicy": {"minAvailable": 3}}}))  # fmt: skip
    (b0,) = pods(k, wl.training_pod(both, "Worker", 0))
    assert k.spec(b0).min_member == 3


def test_elastic_pytorchjob_group_follows_an_hpa(k: Store) -> None:
    j = k.add(wl.training_job("PyTorchJob", "hpa", {"Worker": 2}, spec={"elasticPolicy": {"minReplicas": 2}}))
    w = pods(k, *(wl.training_pod(j, "Worker", i) for i in range(2)))
    assert k.spec(w[0]).min_member == 2
    k.update(j, spec={**j["spec"], "elasticPolicy": {"minReplicas": 3, "maxReplicas": 6},
                      "pytorchReplicaSpecs": {"Worker": {"replicas": 3}}})  # fmt: skip
    k.changed(j)
    assert k.spec(w[0]).min_member == 3


def test_mpijob_wait_for_workers_ready_counts_the_launcher_once_it_exists(k: Store) -> None:
    mj = k.add(wl.mpijob("pi", workers=2, wait_for_workers=True))
    workers = pods(k, wl.mpi_worker(mj, 0), wl.mpi_worker(mj, 1))
    assert k.spec(workers[0]).min_member == 2  # the operator creates the launcher once these are Ready
    launcher = k.add(wl.mpi_launcher_job(mj))
    (lp,) = pods(k, wl.job_pod(launcher))
    assert k.spec(lp).min_member == 3 and k.spec(lp).name == k.spec(workers[0]).name
    k.observe(k.update(workers[1], status=READY))  # another member's event does not undo it
    assert k.spec(workers[0]).min_member == 3
    at_startup = k.add(wl.mpijob("now", workers=2))
    (w,) = pods(k, wl.mpi_worker(at_startup, 0))
    assert k.spec(w).min_member == 3


def test_notebook_is_interactive(k: Store) -> None:
    nb = k.add(wl.notebook("jupyter", labels={"tessera.dev/queue": "dev"}))
    sts = k.add(wl.notebook_statefulset(nb))
    (p,) = pods(k, wl.statefulset_pod(sts, 0))
    g = k.spec(p)
    assert (g.min_member, g.priority_class, g.queue, g.owner and g.owner.kind) == (
        1,
        "build",
        "dev",
        "Notebook",
    )


def test_trainjob_is_handed_to_its_jobset_with_the_trainjobs_labels(k: Store) -> None:
    tj = k.add(wl.trainjob("llama", labels={"kai.scheduler/queue": "ft"}))
    js = k.add(wl.jobset("llama", [wl.replicated_job("node", replicas=2)], owner=tj))
    (p,) = pods(k, wl.job_pod(k.add(wl.jobset_job(js, "node", 0))))
    g = k.spec(p)
    assert (g.min_member, g.queue, g.owner and g.owner.kind) == (2, "ft", "JobSet")


# ---- JobSet ----------------------------------------------------------------------------------------------------
def jobset_pods(
    k: Store, js: dict[str, Any], rj: str, replicas: int, parallelism: int = 1
) -> list[dict[str, Any]]:
    out = []
    for i in range(replicas):
        j = k.add(wl.jobset_job(js, rj, i))
        out += pods(k, *(wl.job_pod(j, n) for n in range(parallelism)))
    return out


def test_jobset_any_order_is_one_gang_of_everything(k: Store) -> None:
    js = k.add(wl.jobset("js", [wl.replicated_job("workers", 2, 4), wl.replicated_job("ps", 1)]))
    (p,) = jobset_pods(k, js, "ps", 1)
    assert k.spec(p).min_member == 9


def test_jobset_in_order_grows_step_by_step(k: Store) -> None:
    """InOrder: the controller creates `workers` only once `driver` is ready: minMember follows."""
    js = k.add(wl.jobset("ordered", [wl.replicated_job("driver", 1), wl.replicated_job("workers", 2, 2)],
                         in_order=True))  # fmt: skip
    (driver,) = jobset_pods(k, js, "driver", 1)
    assert k.spec(driver).min_member == 1  # before: 5, with only 1 pod ever created at this point
    k.observe(k.update(driver, status=READY))
    k.update(js, status={"replicatedJobsStatus": [{"name": "driver", "ready": 1}]})
    k.changed(js)
    workers = jobset_pods(k, js, "workers", 2, 2)
    assert k.spec(workers[0]).min_member == 5  # the 4 workers start together, next to the running driver


def test_jobset_depends_on_complete_drops_finished_initializers(k: Store) -> None:
    js = k.add(wl.jobset("trainer", [
        wl.replicated_job("dataset-initializer", 1), wl.replicated_job("model-initializer", 1),
        wl.replicated_job("node", 3, depends_on=[("dataset-initializer", "Complete"), ("model-initializer", "Complete")]),
    ]))  # fmt: skip
    init = jobset_pods(k, js, "dataset-initializer", 1) + jobset_pods(k, js, "model-initializer", 1)
    assert k.spec(init[0]).min_member == 2
    for p in init:
        k.observe(k.update(p, status=SUCCEEDED))
    k.update(js, status={"replicatedJobsStatus": [{"name": "dataset-initializer", "succeeded": 1},
                                                  {"name": "model-initializer", "succeeded": 1}]})  # fmt: skip
    k.changed(js)
    nodes = jobset_pods(k, js, "node", 3)
    assert k.spec(nodes[0]).min_member == 3  # not 5: the initializers' pods are gone for good


def test_jobset_depends_on_ready_adds_the_launcher_to_the_running_nodes(k: Store) -> None:
    js = k.add(wl.jobset("ds", [wl.replicated_job("node", 2),
                                wl.replicated_job("launcher", 1, depends_on=[("node", "Ready")])]))  # fmt: skip
    nodes = jobset_pods(k, js, "node", 2)
    assert k.spec(nodes[0]).min_member == 2
    (launcher,) = jobset_pods(k, js, "launcher", 1)
    assert k.spec(launcher).min_member == 3


def test_jobset_batch_min_member_and_restart_attempts(k: Store) -> None:
    js = k.add(wl.jobset("some", [wl.replicated_job("a", 1, 4), wl.replicated_job("b", 2, 1),
                                  wl.replicated_job("c", 1, 2, annotations={"kai.scheduler/batch-min-member": "1"})],
                         annotations={"kai.scheduler/batch-min-member": "2"}))  # fmt: skip
    (p,) = jobset_pods(k, js, "c", 1, 1)
    assert k.spec(p).min_member == 1 + 2  # the two smallest replicatedJobs: c (1 per Job) and b (2 x 1)
    ordered = k.add(wl.jobset("re", [wl.replicated_job("x", 1), wl.replicated_job("y", 2)], in_order=True))
    old = jobset_pods(k, ordered, "y", 2)  # attempt 0 reached step y, then the JobSet restarted
    k.update(ordered, status={"restarts": 1})
    j = k.add(wl.jobset_job(ordered, "x", 0, restarts=1))
    (fresh,) = pods(k, wl.job_pod(j, 0, suffix="r1"))
    assert k.spec(fresh).min_member == 1 and k.spec(fresh).name == k.spec(old[0]).name


# ---- LeaderWorkerSet --------------------------------------------------------------------------------------------
def lws_replica(k: Store, lw: dict[str, Any], index: int = 0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    sts = k.add(wl.lws_leader_statefulset(lw))
    (leader,) = pods(k, wl.lws_leader_pod(sts, index))
    return leader, []


def lws_workers(k: Store, lw: dict[str, Any], leader: dict[str, Any]) -> list[dict[str, Any]]:
    wsts = k.add(wl.lws_worker_statefulset(lw, leader))
    size = lw["spec"]["leaderWorkerTemplate"]["size"]
    return pods(k, *(wl.lws_worker_pod(wsts, j) for j in range(1, size)))


def test_lws_leader_and_workers_meet_through_the_leader_pod(k: Store) -> None:
    lw = k.add(wl.lws("llm", size=4, replicas=2, labels={"tessera.dev/queue": "serve"}))
    leader, _ = lws_replica(k, lw)
    workers = lws_workers(k, lw, leader)
    g = k.spec(leader)
    assert {k.spec(w).name for w in workers} == {g.name} and g.min_member == 4 and g.queue == "serve"
    assert (
        g.name == group_name("llm", lw["metadata"]["uid"], "group-0")
        and g.owner
        and g.owner.kind == "LeaderWorkerSet"
    )


def test_lws_leader_ready_is_the_leader_alone_until_it_is_ready(k: Store) -> None:
    lw = k.add(wl.lws("ready", size=3, leader_ready=True))
    leader, _ = lws_replica(k, lw)
    assert k.spec(leader).min_member == 1  # before: 3, and the workers are created only once it runs
    k.observe(k.update(leader, status={"phase": "Running"}))
    assert k.spec(leader).min_member == 1  # running but not Ready: still no workers coming
    k.observe(k.update(leader, status=READY))
    assert k.spec(leader).min_member == 3
    workers = lws_workers(k, lw, leader)
    assert k.spec(workers[0]).min_member == 3


# ---- Ray ---------------------------------------------------------------------------------------------------------
def test_ray_cluster_sizes(k: Store) -> None:
    spec = wl.ray_cluster_spec([{"groupName": "gpu", "replicas": 2}, {"groupName": "tpu", "replicas": 1, "numOfHosts": 2},
                                {"groupName": "off", "replicas": 3, "suspend": True},
                                {"groupName": "min", "replicas": 4, "minReplicas": 1}])  # fmt: skip
    rc = k.add(wl.raycluster("rc", spec, labels={"ray.io/priority-class-name": "build"}))
    (head,) = pods(k, wl.ray_pod(rc, "head", "headgroup", 0))
    assert (k.spec(head).min_member, k.spec(head).priority_class) == (1 + 2 + 2 + 1, "build")
    auto = k.add(
        wl.raycluster(
            "auto", wl.ray_cluster_spec([{"groupName": "g", "replicas": 5, "minReplicas": 0}], True)
        )
    )
    (h2,) = pods(k, wl.ray_pod(auto, "head", "headgroup", 0))
    assert k.spec(h2).min_member == 1


def test_rayjob_cluster_and_submitter_share_one_group(k: Store) -> None:
    spec = wl.ray_cluster_spec([{"groupName": "g", "replicas": 2}])
    rj = k.add(wl.rayjob("rj", spec, labels={"kai.scheduler/queue": "ray"}))
    rc = k.add(wl.raycluster("rj-raycluster-abcde", spec, owner=rj))
    k.update(rj, status={"rayClusterName": rc["metadata"]["name"]})
    head, worker = pods(k, wl.ray_pod(rc, "head", "headgroup", 0), wl.ray_pod(rc, "worker", "g", 0))
    submitter_job = k.add(wl.job("rj-submitter", owner=rj))
    (sub,) = pods(k, wl.job_pod(submitter_job))
    names = {k.spec(p).name for p in (head, worker, sub)}
    assert len(names) == 1 and k.spec(sub).min_member == 3 and k.spec(sub).queue == "ray"


def test_raycronjob_runs_are_grouped_as_their_rayjobs_in_the_crons_queue(k: Store) -> None:
    """RayCronJob (KubeRay 1.5) owns a RayJob per run: skipped, each run is the RayJob's gang, with the
    queue and priority labels written on the RayCronJob (not copied to its RayJobs)."""
    spec = wl.ray_cluster_spec([{"groupName": "g", "replicas": 2}])
    cron = k.add(
        wl.raycronjob("nightly", spec, labels={"kai.scheduler/queue": "ray", "priorityClassName": "build"})
    )
    runs = [k.add(wl.raycronjob_run(cron, suffix)) for suffix in ("a1b2c", "d3e4f")]
    groups = []
    for rj in runs:
        rc = k.add(
            wl.raycluster(f"{rj['metadata']['name']}-raycluster-x", rj["spec"]["rayClusterSpec"], owner=rj)
        )
        head, worker = pods(k, wl.ray_pod(rc, "head", "headgroup", 0), wl.ray_pod(rc, "worker", "g", 0))
        g = k.spec(worker)
        assert k.spec(head).name == g.name == group_name(rj["metadata"]["name"], rj["metadata"]["uid"])
        assert (g.min_member, g.queue, g.priority_class, g.warnings) == (3, "ray", "build", ())
        groups.append(g.name)
    assert len(set(groups)) == 2  # one gang per run


def test_disaggregatedset_roles_are_grouped_as_their_leaderworkersets(k: Store) -> None:
    ds = k.add(
        wl.disaggregatedset(
            "llm", {"prefill": (2, 2), "decode": (1, 4)}, labels={"tessera.dev/queue": "serve"}
        )
    )
    for role, size in (("prefill", 2), ("decode", 4)):
        lw = k.add(wl.disaggregated_lws(ds, role))
        leader, _ = lws_replica(k, lw)
        workers = lws_workers(k, lw, leader)
        g = k.spec(leader)
        assert g.name == group_name(lw["metadata"]["name"], lw["metadata"]["uid"], "group-0")
        assert {k.spec(w).name for w in workers} == {g.name}
        assert (g.min_member, g.queue, g.warnings) == (size, "serve", ())


def test_rayservice_upgrade_cluster_is_its_own_gang(k: Store) -> None:
    spec = wl.ray_cluster_spec([{"groupName": "g", "replicas": 1}])
    svc = k.add(wl.rayservice("serve", spec, labels={"tessera.dev/queue": "svc"}))
    active, pending = (
        k.add(wl.raycluster("serve-raycluster-a", spec, owner=svc)),
        k.add(wl.raycluster("serve-raycluster-b", spec, owner=svc)),
    )
    (a,) = pods(k, wl.ray_pod(active, "head", "headgroup", 0))
    (b,) = pods(k, wl.ray_pod(pending, "head", "headgroup", 0))
    assert k.spec(a).name != k.spec(b).name and k.spec(b).min_member == 2 and k.spec(b).queue == "svc"


# ---- Knative, Argo, Spark ------------------------------------------------------------------------------------------
def test_knative_revision_is_a_gang_of_min_scale(k: Store) -> None:
    svc = k.add(wl.kservice("hello", min_scale=3, labels={"tessera.dev/queue": "web"}))
    rev = k.add(wl.krevision(k.add(wl.kconfiguration(svc))))
    rs = k.add(wl.replicaset(k.add(wl.krevision_deployment(rev))))
    p = pods(k, *(wl.replicaset_pod(rs, f"p{i}") for i in range(3)))
    g = k.spec(p[0])
    assert (g.min_member, g.priority_class, g.queue) == (3, "inference", "web")
    assert g.owner is not None and g.owner.kind == "Revision" and {k.spec(x).name for x in p} == {g.name}


def test_argo_steps_are_separate_with_the_workflows_queue(k: Store) -> None:
    wf = k.add(wl.workflow("wf", labels={"tessera.dev/queue": "ci"}))
    a, b = k.add(wl.workflow_pod(wf, "step-1")), k.add(wl.workflow_pod(wf, "step-2"))
    assert k.observe(a) == k.observe(b) == Decision(None, queue="ci")  # each step its own job, in `ci`


def test_spark_submit_driver_and_executors_meet_by_app_selector(k: Store) -> None:
    (driver,) = pods(k, wl.spark_driver("spark-0123abcd"))
    executors = pods(k, *(wl.spark_executor(driver, i) for i in (1, 2)))
    g = k.spec(driver)
    assert (
        g.name == "spark-0123abcd" and {k.spec(e).name for e in executors} == {g.name} and g.min_member == 1
    )


def test_spark_operator_application(k: Store) -> None:
    app = k.add(wl.sparkapp("etl", labels={"tessera.dev/queue": "data"}))
    (driver,) = pods(k, wl.spark_driver("spark-99", app))
    (ex,) = pods(k, wl.spark_executor(driver, 1, app))
    assert k.spec(ex).name == k.spec(driver).name and k.spec(ex).queue == "data"
    assert k.spec(ex).owner is not None and k.spec(ex).owner.kind == "SparkApplication"


# ---- identity, names, reading problems ---------------------------------------------------------------------------
def test_long_names_keep_the_uid_and_a_recreated_workload_gets_a_new_group(k: Store) -> None:
    name = "a-very-long-jobset-name-that-goes-on-and-on-for-quite-a-while"
    first = k.add(wl.jobset(name, [wl.replicated_job("w", 2)]))
    (p,) = jobset_pods(k, first, "w", 1)
    g1 = k.spec(p)
    assert len(g1.name) <= 63 and g1.name.endswith(first["metadata"]["uid"])
    k.delete(first)
    second = k.add(wl.jobset(name, [wl.replicated_job("w", 2)]))
    (q,) = jobset_pods(k, second, "w", 1)
    assert k.spec(q).name != g1.name and k.spec(q).name.endswith(second["metadata"]["uid"])


def test_an_owner_that_cannot_be_read_is_reported(k: Store) -> None:
    ghost = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "gone", "uid": "u-1"},
    }
    (p,) = pods(k, wl.pod("gone-worker-0", owner=ghost))
    g = k.spec(p)
    assert g.owner is not None and (g.owner.name, g.min_member) == ("gone", 1)
    assert "could not read PyTorchJob gone" in g.warnings[0]


def test_unknown_kinds_group_by_owner_and_the_pod_is_told(k: Store) -> None:
    thing = k.add(wl.obj("example.com/v1", "Thing", "t", spec={}))
    a, b = pods(k, wl.pod("t-1", owner=thing), wl.pod("t-2", owner=thing))
    g = k.spec(a)
    assert g.name == k.spec(b).name and g.min_member == 1
    assert g.owner is not None and (g.owner.kind, g.owner.uid) == ("Thing", thing["metadata"]["uid"])
    # The walk stopped on a kind it may not read: its labels (a queue?) were not seen, and the pod says so.
    (warning,) = g.warnings
    assert (
        warning.startswith("could not read Thing t: forbidden")
        and "grouped by its reference alone" in warning
    )


def test_an_unknown_top_owner_above_a_known_kind_keeps_the_gang(k: Store) -> None:
    """An operator's kind above a JobSet (the chart grants no read of it): the walk stops there, and the
    JobSet below it is the top owner, as KAI's podgrouper takes the last owner it could read. Before, the
    pods were one group of the unknown owner, minMember 1: the gang was lost."""
    pipeline = k.add(wl.obj("workflows.example.dev/v1", "Pipeline", "nightly", spec={}))
    js = k.add(wl.jobset("train", [wl.replicated_job("w", 2)], owner=pipeline))
    a, b = jobset_pods(k, js, "w", 2)
    g = k.spec(a)
    assert (g.name, g.min_member) == (group_name("train", js["metadata"]["uid"]), 2) and k.spec(
        b
    ).name == g.name
    assert g.owner is not None and g.owner.kind == "JobSet"
    (warning,) = k.observe(a).warnings or g.warnings
    assert (
        "could not read Pipeline nightly: forbidden" in warning
        and "grouped as the JobSet below it" in warning
    )


def test_a_group_whose_top_owner_left_the_chain_takes_the_new_one(k: Store) -> None:
    """`kubectl delete jobset --cascade=orphan`: the JobSet goes, its Jobs (and their running pods) stay,
    without owner. The group keeps its name and pods, and takes the Job as its top owner (its rule, and its
    ownership: the PodGroup goes with the Job instead of staying for ever without an owner)."""
    js = k.add(wl.jobset("orphaned", [wl.replicated_job("w", 1, 2)]))
    job = k.add(wl.jobset_job(js, "w", 0))
    a, b = pods(k, wl.job_pod(job, 0), wl.job_pod(job, 1))
    before = k.spec(a)
    assert before.owner is not None and (before.owner.kind, before.min_member) == ("JobSet", 2)
    k.delete(js)
    meta = {key: v for key, v in job["metadata"].items() if key != "ownerReferences"}
    k.changed(k.update(job, metadata=meta))  # the garbage collector removed the Job's owner reference
    after = k.spec(a)
    assert after.name == before.name and k.spec(b).name == before.name
    assert after.owner is not None and (after.owner.kind, after.owner.uid) == ("Job", job["metadata"]["uid"])
    assert (after.rule, after.min_member) == ("Job", 2)  # the Job's rule: a JobSet's Jobs are Indexed


def test_explicit_groups_and_skip_annotation_are_left_alone(k: Store) -> None:
    for key in ("tessera.dev/pod-group", "pod-group-name"):
        (p,) = pods(k, wl.pod(f"named-{len(key)}", annotations={key: "gang"}))
        assert k.observe(p).group is None
    j = k.add(wl.job("skip", 2, 2, True, annotations={"kai.scheduler/skip-podgrouper": "true"}))
    (q,) = pods(k, wl.job_pod(j))
    assert k.observe(q).group is None


# ---- following owners and writing groups ---------------------------------------------------------------------------
def test_owner_events_that_cannot_change_a_group_are_ignored() -> None:
    def ev(
        kind: str, old: dict[str, Any] | None, new: dict[str, Any], type_: str = "MODIFIED"
    ) -> ResourceEvent:
        return ResourceEvent(kind, type_, new, old)

    rs = {
        "kind": "ReplicaSet",
        "metadata": {"generation": 1, "labels": {"a": "1"}},
        "status": {"readyReplicas": 1},
    }
    moved = {**rs, "status": {"readyReplicas": 2}}
    assert not matters(ev("rs", rs, moved), reads_status=False)  # a pod became ready: nothing to decide
    assert matters(
        ev("rs", rs, {**moved, "metadata": {"generation": 2, "labels": {"a": "1"}}}), reads_status=False
    )
    assert matters(
        ev("rs", rs, {**rs, "metadata": {"generation": 1, "labels": {"a": "2"}}}), reads_status=False
    )
    assert matters(ev("job", rs, moved), reads_status=True)  # a Job's succeeded count shrinks an Indexed gang
    assert not matters(ev("rs", rs, rs, "DELETED"), reads_status=True)  # its pods go with it
    assert matters(ev("rs", None, rs, "ADDED"), reads_status=False)


def test_only_what_differs_is_patched() -> None:
    desired = {"minMember": 3, "queue": "q", "priorityClassName": "train", "preemptibility": None,
               "staleGraceSeconds": None}  # fmt: skip
    current = {"minMember": 2, "queue": "q", "priorityClassName": "train", "preemptibility": "preemptible",
               "staleGraceSeconds": 5}  # fmt: skip
    # minMember follows; the preemptibility label was removed; a grace period set by hand is kept.
    assert patch_for(desired, current) == {"minMember": 3, "preemptibility": None}
    assert patch_for(desired, {**current, "minMember": 3, "preemptibility": None}) == {}


def test_a_burst_of_pods_decides_a_group_once(k: Store) -> None:
    js = k.add(wl.jobset("big", [wl.replicated_job("w", 50, 4)], in_order=True))
    decisions = 0
    decide = k.book._decide

    def counting(pod: Any, *, with_members: bool) -> Any:
        nonlocal decisions
        decisions += with_members
        return decide(pod, with_members=with_members)

    k.book._decide = counting  # type: ignore[method-assign]
    for i in range(50):
        j = k.add(wl.jobset_job(js, "w", i))
        for n in range(4):
            k.observe(k.add(wl.job_pod(j, n)))
    (group,) = k.book.take_pending()
    assert group.spec.min_member == 200 and decisions == 1
