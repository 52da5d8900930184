"""Kubeflow: the training-operator's jobs, the MPI operator's MPIJob and Notebooks.

The training-operator (v1: PyTorchJob, TFJob, XGBoostJob, JAXJob, PaddleJob) and the MPI operator own
every replica's pod directly (the MPI v2 launcher through a batch Job), so the top owner is the job:
- minMember: the sum of the replica specs' `replicas`; for an elastic PyTorchJob
  `elasticPolicy.minReplicas` (the HPA scales between min and max replicas), and
  `runPolicy.schedulingPolicy.minAvailable` over both, as KAI; queue and priority class from
  `schedulingPolicy` when the KAI labels do not say;
- MPIJob with `launcherCreationPolicy: WaitForWorkersReady`: the operator creates the launcher only once
  every worker is ready, so until a launcher pod exists the launcher is not counted (as KAI);
- Notebook: one pod (a StatefulSet of one), minMember 1, default priority `build` (interactive), as KAI.
The Trainer's TrainJob is handed to the JobSet it owns (`grouper.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.kube.podgrouper import policy
from scheduler.kube.podgrouper.core import per_owner
from scheduler.kube.podgrouper.model import (
    GroupSpec,
    Obj,
    Workload,
    as_int,
    dig,
    kind_of,
    labels,
    name_of,
    spec,
    uid_of,
)
from scheduler.kube.podgrouper.names import group_name

REPLICA_FIELDS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
}
JOB_ROLE = "training.kubeflow.org/job-role"  # MPI operator v2: launcher / worker
REPLICA_TYPE = "training.kubeflow.org/replica-type"  # training-operator: master / worker / launcher ...
WAIT_FOR_WORKERS = "WaitForWorkersReady"


def replicas(job: Obj, replica_type: str) -> int:
    value = as_int(dig(job, "spec", REPLICA_FIELDS[kind_of(job)], replica_type, "replicas"))
    return 1 if value is None else value  # the operators default a replica spec's replicas to 1


def replica_total(job: Obj, warnings: list[str]) -> int:
    specs = dig(job, "spec", REPLICA_FIELDS[kind_of(job)])
    if not isinstance(specs, Mapping) or not specs:
        warnings.append(f"{kind_of(job)} {name_of(job)} has no {REPLICA_FIELDS[kind_of(job)]}; minMember 1")
        return 1
    return sum(max(0, replicas(job, name)) for name in specs)


def _scheduling_policy(job: Obj) -> Mapping[str, object]:
    value = dig(job, "spec", "runPolicy", "schedulingPolicy")
    return value if isinstance(value, Mapping) else {}


def _min_member(job: Obj, warnings: list[str]) -> int:
    wanted = replica_total(job, warnings)
    elastic = as_int(dig(job, "spec", "elasticPolicy", "minReplicas"))
    if kind_of(job) == "PyTorchJob" and elastic is not None and elastic > 0:
        wanted = elastic
    min_available = as_int(_scheduling_policy(job).get("minAvailable"))
    if min_available is not None and min_available > 0:
        wanted = min_available
    return wanted


def _has_launcher(pods: list[Obj]) -> bool:
    return any(
        labels(p).get(JOB_ROLE) == "launcher" or labels(p).get(REPLICA_TYPE) == "launcher" for p in pods
    )


def training_rule(w: Workload, job: Obj) -> GroupSpec:
    warnings: list[str] = []
    name = group_name(name_of(job), uid_of(job))
    min_member = _min_member(job, warnings)
    if (
        kind_of(job) == "MPIJob"
        and spec(job).get("launcherCreationPolicy") == WAIT_FOR_WORKERS
        and not _has_launcher(w.members(name))
    ):
        min_member -= replicas(job, "Launcher")
    sp = _scheduling_policy(job)
    return policy.build(
        w,
        name=name,
        min_member=min_member,
        owner=job,
        queue_hint=sp.get("queue"),
        priority_hint=sp.get("priorityClass"),
        warnings=warnings,
    )


def notebook_rule(w: Workload, notebook: Obj) -> GroupSpec:
    return per_owner(w, notebook, default_priority=policy.BUILD)
