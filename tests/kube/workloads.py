"""Workload objects exactly as their controllers make them: owner references, labels, annotations, names.

Each builder takes the parent object as the API server returned it (with its UID) and returns the child a
controller would create, so the same steps drive the rule tests (objects kept in memory) and the real API
server tests (objects created through the API, in the controllers' order). What each controller does was
read in its source: Kubernetes' Deployment/ReplicaSet/StatefulSet/Job/CronJob controllers, the LWS leader
StatefulSet and pod controller, the JobSet controller (`constructJob`), the MPI operator
(`newWorker`, `newLauncherJob`), the training-operator, the Trainer's JobSet plugin, KubeRay, Knative
Serving, Argo Workflows, Spark's Kubernetes backend and the Spark operator.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]
SCHEDULER = "tessera"


def obj(
    api_version: str,
    kind: str,
    name: str,
    *,
    spec: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner: Obj | None = None,
    owners: Sequence[tuple[Obj, bool]] = (),
    namespace: str = "default",
) -> Obj:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    refs = [ref(o, controller) for o, controller in owners]
    if owner is not None:
        refs.append(ref(owner))
    if refs:
        meta["ownerReferences"] = refs
    out: Obj = {"apiVersion": api_version, "kind": kind, "metadata": meta}
    if spec is not None:
        out["spec"] = copy.deepcopy(dict(spec))
    return out


def ref(parent: Obj, controller: bool = True) -> dict[str, Any]:
    out = {
        "apiVersion": parent["apiVersion"],
        "kind": parent["kind"],
        "name": parent["metadata"]["name"],
        "uid": parent["metadata"]["uid"],
    }
    if controller:
        out.update(controller=True, blockOwnerDeletion=True)
    return out


def ns(parent: Obj) -> str:
    return str(parent["metadata"].get("namespace") or "default")


def pod(
    name: str,
    *,
    owner: Obj | None = None,
    owners: Sequence[tuple[Obj, bool]] = (),
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    namespace: str | None = None,
    gpus: int = 0,
    priority_class: str | None = None,
) -> Obj:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"schedulerName": SCHEDULER, "containers": [container]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    parent = owner or (owners[0][0] if owners else None)
    return obj(
        "v1", "Pod", name, spec=spec, labels=labels, annotations=annotations, owner=owner, owners=owners,
        namespace=namespace or (ns(parent) if parent else "default"),
    )  # fmt: skip


def pod_template(labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
                 restart: str = "Always") -> dict[str, Any]:  # fmt: skip
    """A pod template as the API server requires it, for the Tessera scheduler."""
    meta: dict[str, Any] = {"labels": dict(labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    spec = {"schedulerName": SCHEDULER, "restartPolicy": restart,
            "containers": [{"name": "main", "image": "busybox"}]}  # fmt: skip
    return {"metadata": meta, "spec": spec}


def template_meta(parent_template: Mapping[str, Any] | None) -> tuple[dict[str, str], dict[str, str]]:
    meta = (parent_template or {}).get("metadata") or {}
    return dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})


# ---- core: Deployment, StatefulSet, Job, CronJob ------------------------------------------------------------
def deployment(name: str, replicas: int = 2, labels: Mapping[str, str] | None = None, **kw: Any) -> Obj:
    pod_labels = {"app": name, **(kw.pop("pod_labels", None) or {})}
    spec = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": pod_template(pod_labels),
    }
    return obj("apps/v1", "Deployment", name, labels=labels, spec=spec, **kw)


def replicaset(dep: Obj, hash_: str = "5d9f7c") -> Obj:
    """The Deployment controller: `<deployment>-<hash>`, the template's labels plus pod-template-hash."""
    labels, _ = template_meta(dep["spec"]["template"])
    labels["pod-template-hash"] = hash_
    spec = {
        "replicas": dep["spec"]["replicas"],
        "selector": {"matchLabels": labels},
        "template": pod_template(labels),
    }
    return obj(
        "apps/v1", "ReplicaSet", f"{dep['metadata']['name']}-{hash_}", labels=labels, spec=spec, owner=dep
    )


def replicaset_pod(rs: Obj, suffix: str, **kw: Any) -> Obj:
    labels, annotations = template_meta(rs["spec"].get("template"))
    return pod(f"{rs['metadata']['name']}-{suffix}", owner=rs, labels=labels, annotations=annotations, **kw)


def statefulset(name: str, replicas: int, parallel: bool = False, **kw: Any) -> Obj:
    spec: dict[str, Any] = {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                            "template": pod_template({"app": name})}  # fmt: skip
    if parallel:
        spec["podManagementPolicy"] = "Parallel"
    return obj("apps/v1", "StatefulSet", name, spec=spec, **kw)


def statefulset_pod(sts: Obj, ordinal: int, **kw: Any) -> Obj:
    """The StatefulSet controller: `<sts>-<ordinal>`, the template's labels and annotations."""
    labels, annotations = template_meta(sts["spec"].get("template"))
    name = f"{sts['metadata']['name']}-{ordinal}"
    labels.update({"statefulset.kubernetes.io/pod-name": name, "apps.kubernetes.io/pod-index": str(ordinal)})
    labels.update(kw.pop("labels", None) or {})
    annotations.update(kw.pop("annotations", None) or {})
    return pod(name, owner=sts, labels=labels, annotations=annotations, **kw)


def job(
    name: str,
    parallelism: int = 1,
    completions: int | None = None,
    indexed: bool = False,
    *,
    template_labels: Mapping[str, str] | None = None,
    **kw: Any,
) -> Obj:
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "template": pod_template(template_labels, restart="Never"),
    }
    if completions is not None:
        spec["completions"] = completions
    if indexed:
        spec["completionMode"] = "Indexed"
    return obj("batch/v1", "Job", name, spec=spec, **kw)


def job_pod(j: Obj, index: int = 0, suffix: str | None = None, **kw: Any) -> Obj:
    """The Job controller: `<job>-[<index>-]<random>`, labels job-name / controller-uid (and the index)."""
    labels, annotations = template_meta(j["spec"].get("template"))
    labels.update({"batch.kubernetes.io/job-name": j["metadata"]["name"], "job-name": j["metadata"]["name"],
                   "batch.kubernetes.io/controller-uid": j["metadata"]["uid"]})  # fmt: skip
    name = f"{j['metadata']['name']}-{suffix or f'x{index}q'}"
    if j["spec"].get("completionMode") == "Indexed":
        labels["batch.kubernetes.io/job-completion-index"] = str(index)
        annotations["batch.kubernetes.io/job-completion-index"] = str(index)
        name = f"{j['metadata']['name']}-{index}-{suffix or 'x7kq'}"
    labels.update(kw.pop("labels", None) or {})
    annotations.update(kw.pop("annotations", None) or {})
    return pod(name, owner=j, labels=labels, annotations=annotations, **kw)


def cronjob(name: str, *, labels: Mapping[str, str] | None = None,
            job_labels: Mapping[str, str] | None = None, job_annotations: Mapping[str, str] | None = None,
            **kw: Any) -> Obj:  # fmt: skip
    job_template = {"metadata": {"labels": dict(job_labels or {}), "annotations": dict(job_annotations or {})},
                    "spec": {"template": pod_template(restart="Never")}}  # fmt: skip
    return obj("batch/v1", "CronJob", name, labels=labels,
               spec={"schedule": "*/5 * * * *", "jobTemplate": job_template}, **kw)  # fmt: skip


def cronjob_run(cron: Obj, stamp: int) -> Obj:
    """The CronJob controller: Job `<cronjob>-<minutes>` with the jobTemplate's labels and annotations."""
    template = cron["spec"]["jobTemplate"]
    return obj("batch/v1", "Job", f"{cron['metadata']['name']}-{stamp}", owner=cron,
               labels=template["metadata"].get("labels"), annotations=template["metadata"].get("annotations"),
               spec=copy.deepcopy(template["spec"]))  # fmt: skip


# ---- Kubeflow: training-operator, MPI operator, Notebook, Trainer -------------------------------------------
def training_job(kind: str, name: str, replicas: Mapping[str, int], **kw: Any) -> Obj:
    field = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs", "XGBoostJob": "xgbReplicaSpecs",
             "JAXJob": "jaxReplicaSpecs", "PaddleJob": "paddleReplicaSpecs"}[kind]  # fmt: skip
    spec: dict[str, Any] = {
        field: {t: {"replicas": n, "template": {"spec": {}}} for t, n in replicas.items()}
    }
    spec.update(kw.pop("spec", None) or {})
    return obj("kubeflow.org/v1", kind, name, spec=spec, **kw)


def training_pod(j: Obj, replica_type: str, index: int, **kw: Any) -> Obj:
    """The training-operator: `<job>-<type>-<index>` owned by the job, with its replica labels."""
    name = j["metadata"]["name"]
    labels = {"training.kubeflow.org/job-name": name, "training.kubeflow.org/operator-name": "pytorchjob-controller",
              "training.kubeflow.org/replica-type": replica_type.lower(),
              "training.kubeflow.org/replica-index": str(index)}  # fmt: skip
    if replica_type == "Master":
        labels["training.kubeflow.org/job-role"] = "master"
    return pod(f"{name}-{replica_type.lower()}-{index}", owner=j, labels=labels, **kw)


def mpijob(name: str, workers: int, *, wait_for_workers: bool = False, **kw: Any) -> Obj:
    spec: dict[str, Any] = {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": {"spec": {}}},
                                                "Worker": {"replicas": workers, "template": {"spec": {}}}},
                            "runPolicy": {"cleanPodPolicy": "Running"}}  # fmt: skip
    if wait_for_workers:
        spec["launcherCreationPolicy"] = "WaitForWorkersReady"
    return obj("kubeflow.org/v2beta1", "MPIJob", name, spec=spec, **kw)


def _mpi_labels(name: str, role: str) -> dict[str, str]:
    return {"training.kubeflow.org/operator-name": "mpi-operator", "training.kubeflow.org/job-name": name,
            "training.kubeflow.org/job-role": role}  # fmt: skip


def mpi_worker(mj: Obj, index: int, **kw: Any) -> Obj:
    """MPI operator v2 `newWorker`: pod `<job>-worker-<i>` owned by the MPIJob."""
    labels = {
        **_mpi_labels(mj["metadata"]["name"], "worker"),
        "training.kubeflow.org/replica-index": str(index),
    }
    return pod(f"{mj['metadata']['name']}-worker-{index}", owner=mj, labels=labels, **kw)


def mpi_launcher_job(mj: Obj) -> Obj:
    """MPI operator v2 `newLauncherJob`: batch Job `<job>-launcher` owned by the MPIJob."""
    name = mj["metadata"]["name"]
    template = pod_template(_mpi_labels(name, "launcher"), restart="Never")
    return obj("batch/v1", "Job", f"{name}-launcher", owner=mj, labels={"app": name},
               spec={"template": template, "parallelism": 1, "podReplacementPolicy": "Failed"})  # fmt: skip


def notebook(name: str, **kw: Any) -> Obj:
    return obj("kubeflow.org/v1", "Notebook", name, spec={"template": {"spec": {}}}, **kw)


def notebook_statefulset(nb: Obj) -> Obj:
    """The notebook controller: a StatefulSet of one, same name, owned by the Notebook."""
    name = nb["metadata"]["name"]
    labels = {"statefulset": name, "notebook-name": name}
    return obj("apps/v1", "StatefulSet", name, owner=nb, spec={"replicas": 1, "serviceName": name,
               "selector": {"matchLabels": {"statefulset": name}}, "template": pod_template(labels)})  # fmt: skip


def trainjob(name: str, **kw: Any) -> Obj:
    return obj("trainer.kubeflow.org/v1alpha1", "TrainJob", name,
               spec={"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}, **kw)  # fmt: skip


# ---- JobSet --------------------------------------------------------------------------------------------------
def replicated_job(name: str, replicas: int = 1, parallelism: int = 1, *, depends_on: Sequence[tuple[str, str]] = (),
                   annotations: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    rj: dict[str, Any] = {"name": name, "replicas": replicas,
                          "template": {"metadata": {"annotations": dict(annotations or {})},
                                       "spec": {"parallelism": parallelism, "completions": parallelism,
                                                "backoffLimit": 0,
                                                "template": pod_template(restart="Never")}}}  # fmt: skip
    if depends_on:
        rj["dependsOn"] = [{"name": n, "status": s} for n, s in depends_on]
    return rj


def jobset(name: str, rjobs: Sequence[dict[str, Any]], *, in_order: bool = False, owner: Obj | None = None,
           **kw: Any) -> Obj:  # fmt: skip
    spec: dict[str, Any] = {"replicatedJobs": list(rjobs)}
    if in_order:
        spec["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    return obj("jobset.x-k8s.io/v1alpha2", "JobSet", name, spec=spec, owner=owner, **kw)


def jobset_job(js: Obj, rj_name: str, index: int, restarts: int = 0) -> Obj:
    """JobSet `constructJob`: Job `<jobset>-<rjob>-<index>` owned by the JobSet; labels on Job and pods."""
    rj = next(r for r in js["spec"]["replicatedJobs"] if r["name"] == rj_name)
    name = js["metadata"]["name"]
    labels = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/jobset-uid": js["metadata"]["uid"],
              "jobset.sigs.k8s.io/replicatedjob-name": rj_name, "jobset.sigs.k8s.io/restart-attempt": str(restarts),
              "jobset.sigs.k8s.io/replicatedjob-replicas": str(rj["replicas"]),
              "jobset.sigs.k8s.io/job-index": str(index)}  # fmt: skip
    spec = copy.deepcopy(rj["template"]["spec"])
    spec["template"].setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    spec["completionMode"] = "Indexed"
    annotations = dict(rj["template"].get("metadata", {}).get("annotations") or {})
    return obj("batch/v1", "Job", f"{name}-{rj_name}-{index}", owner=js, labels=labels, annotations=annotations,
               spec=spec)  # fmt: skip


# ---- LeaderWorkerSet -----------------------------------------------------------------------------------------
LWS_NAME, GROUP_INDEX, WORKER_INDEX = ("leaderworkerset.sigs.k8s.io/name",
                                       "leaderworkerset.sigs.k8s.io/group-index",
                                       "leaderworkerset.sigs.k8s.io/worker-index")  # fmt: skip
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"


def lws(name: str, size: int, replicas: int = 1, *, leader_ready: bool = False, **kw: Any) -> Obj:
    spec: dict[str, Any] = {"replicas": replicas,
                            "leaderWorkerTemplate": {"size": size, "workerTemplate": {"spec": {}}}}  # fmt: skip
    if leader_ready:
        spec["startupPolicy"] = "LeaderReady"
    return obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", name, spec=spec, **kw)


def lws_leader_statefulset(lw: Obj) -> Obj:
    """LWS controller: leader StatefulSet named as the LWS, owned by it, Parallel, one pod per replica."""
    name, size = lw["metadata"]["name"], lw["spec"]["leaderWorkerTemplate"]["size"]
    template = pod_template({WORKER_INDEX: "0", LWS_NAME: name}, {LWS_SIZE: str(size)})
    selector = {"matchLabels": {LWS_NAME: name, WORKER_INDEX: "0"}}
    return obj("apps/v1", "StatefulSet", name, owner=lw, labels=lw["metadata"].get("labels"),
               spec={"replicas": lw["spec"]["replicas"], "podManagementPolicy": "Parallel",
                     "serviceName": name, "selector": selector, "template": template})  # fmt: skip


def lws_leader_pod(sts: Obj, index: int) -> Obj:
    """StatefulSet controller + LWS pod webhook: `<lws>-<i>`, group-index i, worker-index 0."""
    labels, annotations = template_meta(sts["spec"]["template"])
    labels[GROUP_INDEX] = str(index)
    labels["leaderworkerset.sigs.k8s.io/group-key"] = f"key{index}"
    return pod(f"{sts['metadata']['name']}-{index}", owner=sts, labels=labels, annotations=annotations)


def lws_worker_statefulset(lw: Obj, leader: Obj) -> Obj:
    """LWS pod controller: worker StatefulSet named as the leader pod, *owned by the leader pod*."""
    size = int(leader["metadata"]["annotations"][LWS_SIZE])
    labels = {GROUP_INDEX: leader["metadata"]["labels"][GROUP_INDEX], LWS_NAME: lw["metadata"]["name"],
              "leaderworkerset.sigs.k8s.io/group-key": leader["metadata"]["labels"].get(
                  "leaderworkerset.sigs.k8s.io/group-key", f"key{leader['metadata']['labels'][GROUP_INDEX]}")}  # fmt: skip
    template = pod_template(
        labels, {LWS_SIZE: str(size), "leaderworkerset.sigs.k8s.io/leader-name": leader["metadata"]["name"]}
    )
    return obj("apps/v1", "StatefulSet", leader["metadata"]["name"], owner=leader, labels=labels,
               spec={"replicas": size - 1, "podManagementPolicy": "Parallel", "template": template,
                     "serviceName": lw["metadata"]["name"], "selector": {"matchLabels": labels},
                     "ordinals": {"start": 1}})  # fmt: skip


def lws_worker_pod(wsts: Obj, ordinal: int) -> Obj:
    """StatefulSet controller + LWS pod webhook: `<leader>-<j>` (j from 1), worker-index j."""
    labels, annotations = template_meta(wsts["spec"]["template"])
    labels[WORKER_INDEX] = str(ordinal)
    return pod(f"{wsts['metadata']['name']}-{ordinal}", owner=wsts, labels=labels, annotations=annotations)


# ---- KubeRay -------------------------------------------------------------------------------------------------
def ray_cluster_spec(workers: Sequence[Mapping[str, Any]], autoscaling: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"headGroupSpec": {"template": {"spec": {}}},
                            "workerGroupSpecs": [{"template": {"spec": {}}, **w} for w in workers]}  # fmt: skip
    if autoscaling:
        spec["enableInTreeAutoscaling"] = True
    return spec


def raycluster(name: str, spec: Mapping[str, Any], *, owner: Obj | None = None, **kw: Any) -> Obj:
    return obj("ray.io/v1", "RayCluster", name, spec=spec, owner=owner, **kw)


def ray_pod(cluster: Obj, node_type: str, group: str, index: int) -> Obj:
    """KubeRay: head `<cluster>-head-<x>`, workers `<cluster>-<group>-worker-<x>`, owned by the RayCluster."""
    name = cluster["metadata"]["name"]
    labels = {"ray.io/cluster": name, "ray.io/node-type": node_type, "ray.io/group": group,
              "ray.io/is-ray-node": "yes"}  # fmt: skip
    pod_name = f"{name}-head-x{index}" if node_type == "head" else f"{name}-{group}-worker-x{index}"
    return pod(pod_name, owner=cluster, labels=labels)


def rayjob(name: str, cluster_spec: Mapping[str, Any], **kw: Any) -> Obj:
    return obj("ray.io/v1", "RayJob", name, spec={"entrypoint": "python train.py",
               "rayClusterSpec": cluster_spec}, **kw)  # fmt: skip


def rayservice(name: str, cluster_spec: Mapping[str, Any], **kw: Any) -> Obj:
    return obj("ray.io/v1", "RayService", name, spec={"rayClusterConfig": cluster_spec}, **kw)


def raycronjob(name: str, cluster_spec: Mapping[str, Any], **kw: Any) -> Obj:
    return obj("ray.io/v1", "RayCronJob", name, spec={"schedule": "0 3 * * *", "jobTemplate": {
        "entrypoint": "python train.py", "rayClusterSpec": cluster_spec}}, **kw)  # fmt: skip


def raycronjob_run(cron: Obj, suffix: str = "x7k9q") -> Obj:
    """KubeRay's RayCronJob controller (`constructRayJob`): RayJob `<cron>-<5 random characters>` whose spec
    is the jobTemplate, controlled by the RayCronJob; the RayCronJob's own labels are not copied."""
    name = cron["metadata"]["name"]
    return obj("ray.io/v1", "RayJob", f"{name}-{suffix}", owner=cron, namespace=ns(cron),
               labels={"ray.io/cronjob-name": name}, spec=cron["spec"]["jobTemplate"])  # fmt: skip


# ---- DisaggregatedSet (LWS) ----------------------------------------------------------------------------------
DS_NAME, DS_ROLE = "disaggregatedset.x-k8s.io/name", "disaggregatedset.x-k8s.io/role"


def disaggregatedset(name: str, roles: Mapping[str, tuple[int, int]], **kw: Any) -> Obj:
    """Roles (prefill, decode ...) -> (replicas, group size), each role a LeaderWorkerSet spec."""
    spec = {"roles": [{"name": role, "spec": {"replicas": replicas, "leaderWorkerTemplate": {
        "size": size, "workerTemplate": {"spec": {}}}}} for role, (replicas, size) in roles.items()]}  # fmt: skip
    return obj("disaggregatedset.x-k8s.io/v1", "DisaggregatedSet", name, spec=spec, **kw)


def disaggregated_lws(ds: Obj, role: str, revision: str = "rev1", slice_index: int = 0) -> Obj:
    """The DisaggregatedSet controller: one LeaderWorkerSet per role (and slice, revision), named
    `<set>-<slice>-<revision>-<role>`, controlled by the set, labelled with its name and the role."""
    name = ds["metadata"]["name"]
    (role_spec,) = [r["spec"] for r in ds["spec"]["roles"] if r["name"] == role]
    return obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", f"{name}-{slice_index}-{revision}-{role}",
               owner=ds, namespace=ns(ds), labels={DS_NAME: name, DS_ROLE: role},
               spec=copy.deepcopy(role_spec))  # fmt: skip


# ---- Knative Serving -----------------------------------------------------------------------------------------
def kservice(name: str, min_scale: int | None = None, **kw: Any) -> Obj:
    annotations = {"autoscaling.knative.dev/min-scale": str(min_scale)} if min_scale is not None else {}
    return obj("serving.knative.dev/v1", "Service", name,
               spec={"template": {"metadata": {"annotations": annotations}, "spec": {}}}, **kw)  # fmt: skip


def kconfiguration(svc: Obj) -> Obj:
    name = svc["metadata"]["name"]
    return obj("serving.knative.dev/v1", "Configuration", name, owner=svc,
               labels={**(svc["metadata"].get("labels") or {}), "serving.knative.dev/service": name},
               spec={"template": svc["spec"]["template"]})  # fmt: skip


def krevision(cfg: Obj, generation: int = 1) -> Obj:
    """Knative: Revision `<config>-0000<n>` owned by the Configuration, template annotations on it."""
    name = cfg["metadata"]["name"]
    template = cfg["spec"]["template"]
    labels = {"serving.knative.dev/configuration": name, "serving.knative.dev/service": name,
              "serving.knative.dev/configurationGeneration": str(generation)}  # fmt: skip
    return obj("serving.knative.dev/v1", "Revision", f"{name}-{generation:05d}", owner=cfg, labels=labels,
               annotations=(template.get("metadata") or {}).get("annotations"), spec={})  # fmt: skip


def krevision_deployment(rev: Obj) -> Obj:
    """Knative: Deployment `<revision>-deployment` owned by the Revision; pods labelled with the revision."""
    name = rev["metadata"]["name"]
    labels = {**rev["metadata"]["labels"], "serving.knative.dev/revision": name,
              "serving.knative.dev/revisionUID": rev["metadata"]["uid"], "app": name}  # fmt: skip
    return obj("apps/v1", "Deployment", f"{name}-deployment", owner=rev, labels=labels,
               spec={"replicas": int(((rev["metadata"].get("annotations") or {}).get(
                         "autoscaling.knative.dev/min-scale")) or 1),
                     "selector": {"matchLabels": {"serving.knative.dev/revisionUID": rev["metadata"]["uid"]}},
                     "template": pod_template(labels)})  # fmt: skip


# ---- Argo Workflows --------------------------------------------------------------------------------------------
def workflow(name: str, **kw: Any) -> Obj:
    return obj("argoproj.io/v1alpha1", "Workflow", name, spec={"entrypoint": "main"}, **kw)


def workflow_pod(wf: Obj, step: str) -> Obj:
    """Argo's controller: one pod per step, owned by the Workflow, labelled with it."""
    name = wf["metadata"]["name"]
    return pod(f"{name}-{step}", owner=wf, labels={"workflows.argoproj.io/workflow": name,
               "workflows.argoproj.io/completed": "false"})  # fmt: skip


# ---- Spark -----------------------------------------------------------------------------------------------------
def sparkapp(name: str, **kw: Any) -> Obj:
    return obj("sparkoperator.k8s.io/v1beta2", "SparkApplication", name,
               spec={"type": "Scala", "mode": "cluster", "driver": {}, "executor": {"instances": 2}}, **kw)  # fmt: skip


def spark_driver(app_id: str, app: Obj | None = None, name: str = "spark-pi") -> Obj:
    """Spark's Kubernetes backend: the driver carries spark-app-selector / spark-role; the operator makes
    the SparkApplication its controller."""
    labels = {"spark-app-selector": app_id, "spark-role": "driver", "spark-app-name": name}
    if app is not None:
        labels["sparkoperator.k8s.io/app-name"] = app["metadata"]["name"]
        labels["sparkoperator.k8s.io/launched-by-spark-operator"] = "true"
    return pod(f"{name}-driver", owner=app, labels=labels)


def spark_executor(driver: Obj, index: int, app: Obj | None = None) -> Obj:
    """Spark makes the driver pod the executors' controller; the operator adds a non-controller reference
    to the SparkApplication through the executor template."""
    labels = {k: v for k, v in driver["metadata"]["labels"].items() if k != "spark-role"}
    labels.update({"spark-role": "executor", "spark-exec-id": str(index)})
    owners = [(app, False)] if app is not None else []
    owners.append((driver, True))
    base = driver["metadata"]["name"].removesuffix("-driver")
    return pod(f"{base}-exec-{index}", owners=owners, labels=labels)
