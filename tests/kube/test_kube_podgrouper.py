"""Podgrouper rules per owner kind (pure), and the owner walk over the fake API server."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from scheduler.kube.owners import ApiOwnerLookup
from scheduler.kube.podgrouper import GroupSpec, group_for_chain, group_for_pod, group_name
from scheduler.kube.podgroups import PodGroupEnsurer
from tests.fakes.kubeapi import FakeKubeAPI
from tests.kube.helpers import pod_body


def owner(
    api_version: str,
    kind: str,
    name: str,
    spec: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    parent: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "uid": f"{name}-uid-0001",
        "labels": labels or {},
    }
    if parent is not None:
        pm = parent["metadata"]
        meta["ownerReferences"] = [
            {
                "apiVersion": parent["apiVersion"],
                "kind": parent["kind"],
                "name": pm["name"],
                "uid": pm["uid"],
                "controller": True,
            }
        ]
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec or {}}


def pod_of(parent: dict[str, Any] | None, name: str = "p-0", **kw: Any) -> dict[str, Any]:
    body = pod_body(name, **kw)
    body["metadata"]["uid"] = f"{name}-uid-1234"
    if parent is not None:
        pm = parent["metadata"]
        body["metadata"]["ownerReferences"] = [
            {
                "apiVersion": parent["apiVersion"],
                "kind": parent["kind"],
                "name": pm["name"],
                "uid": pm["uid"],
                "controller": True,
            }
        ]
    return body


def _group(pod: dict[str, Any], *chain: dict[str, Any]) -> GroupSpec:
    return group_for_chain(pod, list(chain))


def test_bare_pod_is_its_own_group() -> None:
    g = _group(pod_of(None, labels={"tessera.dev/queue": "team-a"}))
    assert (g.min_member, g.queue, g.owner and g.owner.kind) == (1, "team-a", "Pod")
    assert g.name.startswith("pg-p-0-")


def test_named_group_annotation_wins() -> None:
    for key in ("tessera.dev/pod-group", "pod-group-name"):
        g = group_for_pod(pod_of(None, annotations={key: "gang"}), lambda *a: None)
        assert (g.name, g.explicit, g.owner) == ("gang", True, None)


def test_deployment_pods_are_grouped_one_by_one() -> None:
    dep = owner("apps/v1", "Deployment", "web", {"replicas": 3}, labels={"kai.scheduler/queue": "svc"})
    rs = owner("apps/v1", "ReplicaSet", "web-abc", parent=dep)
    a, b = _group(pod_of(rs, "web-abc-1"), rs, dep), _group(pod_of(rs, "web-abc-2"), rs, dep)
    assert a.name != b.name and a.min_member == b.min_member == 1 and a.queue == "svc"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"parallelism": 4}, 1),
        ({"parallelism": 4, "completions": 4, "completionMode": "Indexed"}, 4),
        ({"parallelism": 8, "completions": 2, "completionMode": "Indexed"}, 2),
    ],
)
def test_job(spec: dict[str, Any], expected: int) -> None:
    job = owner("batch/v1", "Job", "train", spec)
    assert _group(pod_of(job), job).min_member == expected


def test_cronjob_groups_per_run() -> None:
    cron = owner("batch/v1", "CronJob", "nightly", labels={"tessera.dev/queue": "batch"})
    run1 = owner("batch/v1", "Job", "nightly-1", parent=cron)
    run2 = owner("batch/v1", "Job", "nightly-2", parent=cron)
    g1, g2 = _group(pod_of(run1), run1, cron), _group(pod_of(run2), run2, cron)
    assert g1.name != g2.name and g1.queue == "batch" and g1.owner is not None and g1.owner.kind == "Job"


def test_statefulset_gang_only_when_parallel() -> None:
    ordered = owner("apps/v1", "StatefulSet", "db", {"replicas": 3})
    parallel = owner("apps/v1", "StatefulSet", "ps", {"replicas": 3, "podManagementPolicy": "Parallel"})
    assert _group(pod_of(ordered), ordered).min_member == 1
    assert _group(pod_of(parallel), parallel).min_member == 3


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("PyTorchJob", "pytorchReplicaSpecs"),
        ("TFJob", "tfReplicaSpecs"),
        ("MPIJob", "mpiReplicaSpecs"),
        ("JAXJob", "jaxReplicaSpecs"),
        ("XGBoostJob", "xgbReplicaSpecs"),
    ],
)
def test_kubeflow_jobs(kind: str, field: str) -> None:
    job = owner(
        "kubeflow.org/v1", kind, "dist", {field: {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}}
    )
    g = _group(pod_of(job), job)
    assert (g.min_member, g.queue) == (4, "default") and g.owner is not None and g.owner.kind == kind
    job["spec"]["runPolicy"] = {
        "schedulingPolicy": {"minAvailable": 2, "queue": "research", "priorityClass": "train"}
    }
    g = _group(pod_of(job), job)
    assert (g.min_member, g.queue, g.priority_class) == (2, "research", "train")


def test_ray() -> None:
    spec = {"headGroupSpec": {}, "workerGroupSpecs": [{"replicas": 2}, {"replicas": 1, "numOfHosts": 2}]}
    cluster = owner("ray.io/v1", "RayCluster", "rc", spec)
    assert _group(pod_of(cluster), cluster).min_member == 5
    auto = owner(
        "ray.io/v1",
        "RayCluster",
        "rc2",
        {"enableInTreeAutoscaling": True, "workerGroupSpecs": [{"replicas": 5, "minReplicas": 1}]},
    )
    assert _group(pod_of(auto), auto).min_member == 2
    rayjob = owner("ray.io/v1", "RayJob", "rj", {"rayClusterSpec": spec})
    inner = owner("ray.io/v1", "RayCluster", "rj-raycluster", spec, parent=rayjob)
    g = _group(pod_of(inner), inner, rayjob)
    assert g.min_member == 5 and g.owner is not None and g.owner.kind == "RayJob"


def test_jobset_and_leaderworkerset() -> None:
    js = owner(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "js",
        {
            "replicatedJobs": [
                {"replicas": 2, "template": {"spec": {"parallelism": 4}}},
                {"replicas": 1, "template": {"spec": {}}},
            ]
        },
    )
    job = owner("batch/v1", "Job", "js-workers-0", parent=js)
    assert _group(pod_of(job), job, js).min_member == 9
    lws = owner(
        "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "llm", {"leaderWorkerTemplate": {"size": 4}}
    )
    sts = owner("apps/v1", "StatefulSet", "llm", parent=lws)
    g0 = _group(pod_of(sts, labels={"leaderworkerset.sigs.k8s.io/group-index": "0"}), sts, lws)
    g1 = _group(pod_of(sts, labels={"leaderworkerset.sigs.k8s.io/group-index": "1"}), sts, lws)
    assert g0.min_member == 4 and g0.name != g1.name


def test_argo_workflow_steps_are_separate_and_unknown_kinds_group_by_owner() -> None:
    wf = owner("argoproj.io/v1alpha1", "Workflow", "wf", labels={"tessera.dev/queue": "ci"})
    a, b = _group(pod_of(wf, "wf-step-1"), wf), _group(pod_of(wf, "wf-step-2"), wf)
    assert a.name != b.name and a.queue == "ci"
    thing = owner("example.com/v1", "Thing", "t")
    x, y = _group(pod_of(thing, "t-1"), thing), _group(pod_of(thing, "t-2"), thing)
    assert x.name == y.name and x.min_member == 1


def test_group_names_are_dns_labels() -> None:
    name = group_name("pg", "Some_Very.Long" * 10, "UID")
    assert len(name) <= 63 and name == name.lower() and "_" not in name and not name.endswith("-")


def test_owner_walk_over_the_api_and_podgroup_creation(kube_api: FakeKubeAPI) -> None:
    job = kube_api.seed(
        owner(
            "kubeflow.org/v1",
            "PyTorchJob",
            "ddp",
            {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 1}}},
            labels={"tessera.dev/queue": "team-a"},
        )
    )
    pod = kube_api.seed(pod_of(job, "ddp-worker-0"))
    api = kube_api.client()
    lookup = ApiOwnerLookup(api)
    g = group_for_pod(pod, lookup)
    assert (g.min_member, g.queue) == (2, "team-a")
    group_for_pod(pod, lookup)
    assert len(kube_api.requests_matching("GET", "/pytorchjobs/ddp$")) == 1  # cached
    ensurer = PodGroupEnsurer(client.CustomObjectsApi(api))
    assert (ensurer.ensure(g), ensurer.ensure(g)) == ("created", "exists")
    stored = kube_api.get("podgroups", g.name, "default")
    assert stored["spec"] == {"minMember": 2, "queue": "team-a"}
    assert stored["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert len(kube_api.requests_matching("POST", "/podgroups$")) == 1
    orphan = pod_of(owner("kubeflow.org/v1", "PyTorchJob", "missing"), "o-0")
    g2 = group_for_pod(orphan, lookup)  # owner unreadable: still grouped by the reference
    assert g2.owner is not None and g2.owner.name == "missing"
