"""Built-in workloads: bare Pods, Deployments and ReplicaSets, StatefulSets, DaemonSets, Jobs and CronJobs.

- a bare pod is its own group; a pod owned by another pod joins the owner's group (Spark executors and
  their driver, see `spark.py`);
- Deployment: one group per pod (replicas are independent), default priority `inference`, as KAI;
- ReplicaSet, DaemonSet, ReplicationController: one group per owner, minMember 1 (KAI's default grouper);
- StatefulSet: minMember = replicas with podManagementPolicy Parallel (all pods are created at once),
  else 1 (OrderedReady creates the next pod only when the previous one is ready, so a gang would never
  form); KAI always uses 1;
- Job: minMember 1, or for an Indexed Job the pods that run at once, min(parallelism, completions left);
  `kai.scheduler/batch-min-member` on the Job overrides it (as KAI), capped by the completions left;
- CronJob: each run (Job) is its own workload, grouped by the Job rule: queue and min-member come from
  the Job, i.e. from the CronJob's `jobTemplate`, as KAI.
"""

from __future__ import annotations

from scheduler.kube.podgrouper import policy, spark
from scheduler.kube.podgrouper.model import (
    GroupSpec,
    Obj,
    Workload,
    as_int,
    kind_of,
    name_of,
    spec,
    status,
    uid_of,
)
from scheduler.kube.podgrouper.names import group_name


def per_owner(w: Workload, owner: Obj, *, default_priority: str = policy.TRAIN) -> GroupSpec:
    """KAI's default grouper: one group per owner, minMember 1."""
    return policy.build(
        w,
        name=group_name(name_of(owner), uid_of(owner)),
        min_member=1,
        owner=owner,
        default_priority=default_priority,
    )


def per_pod(w: Workload, owner: Obj, *, default_priority: str = policy.TRAIN) -> GroupSpec:
    """One group per pod (owned by the pod), attributes read from `owner` as well."""
    return policy.build(
        w,
        name=group_name(name_of(w.pod), uid_of(w.pod)),
        min_member=1,
        owner=w.pod,
        queue_owner=owner,
        default_priority=default_priority,
        rule=kind_of(owner),
    )


def pod_rule(w: Workload, owner: Obj) -> GroupSpec:
    """A bare pod (owner is the pod) or a pod owned by a pod (owner is the top pod)."""
    if spark.is_bare_spark_pod(owner):
        return spark.bare_rule(w, owner)
    return per_owner(w, owner)


def deployment_rule(w: Workload, owner: Obj) -> GroupSpec:
    return per_pod(w, owner, default_priority=policy.INFERENCE)


def default_rule(w: Workload, owner: Obj) -> GroupSpec:
    return per_owner(w, owner)


def statefulset_rule(w: Workload, owner: Obj) -> GroupSpec:
    parallel = spec(owner).get("podManagementPolicy") == "Parallel"
    replicas = as_int(spec(owner).get("replicas"))
    return policy.build(
        w,
        name=group_name(name_of(owner), uid_of(owner)),
        min_member=(1 if replicas is None else replicas) if parallel else 1,
        owner=owner,
    )


def job_min_member(job: Obj, warnings: list[str]) -> int:
    s = spec(job)
    parallelism = as_int(s.get("parallelism"))
    parallelism = 1 if parallelism is None else parallelism
    completions = as_int(s.get("completions"))
    left = None if completions is None else completions - (as_int(status(job).get("succeeded")) or 0)
    override = policy.min_member_override(job, warnings)
    if override is not None:
        wanted = override
    elif s.get("completionMode") == "Indexed":
        wanted = parallelism
    else:
        return 1
    # Pods of completed indexes never come back: asking for more than are left would wait for ever.
    return max(1, wanted if left is None else min(wanted, left))


def job_rule(w: Workload, job: Obj) -> GroupSpec:
    warnings: list[str] = []
    min_member = job_min_member(job, warnings)
    return policy.build(
        w,
        name=group_name(name_of(job), uid_of(job)),
        min_member=min_member,
        owner=job,
        warnings=warnings,
        rule="Job",
    )


def cronjob_rule(w: Workload, cron: Obj) -> GroupSpec:
    """Group by the run: the Job just below the CronJob (its labels and annotations are the jobTemplate's)."""
    job = w.below(cron)
    return job_rule(w, job) if kind_of(job) == "Job" else per_owner(w, cron)
