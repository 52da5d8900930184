"""The kinds the podgrouper knows: for each, its API group and resource, the rule that groups its pods, and
one line saying what the rule does next to what KAI Scheduler's podgrouper does.

This list is the single source of three things: the rule used for a top owner, the scheduler's read-only
RBAC (`scripts/render_chart.py` writes it into the Helm chart: get/list/watch on exactly these resources),
and the table in docs/podgrouper.md. A kind not listed is grouped by KAI's default rule (one group per
top owner, minMember 1) from the owner reference alone, since the scheduler may not read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduler.kube.podgrouper import core, jobset, knative, kubeflow, lws, ray, spark
from scheduler.kube.podgrouper.model import GroupSpec, Obj, Workload

Rule = Callable[[Workload, Obj], GroupSpec]


@dataclass(frozen=True)
class Kind:
    group: str  # API group ("" for the core group)
    kind: str
    plural: str
    # None: the kind is skipped, its pods grouped by the owner below it (KAI's skip-top-owner).
    rule: Rule | None
    ours: str
    kai: str


_SAME = "same"
_DEFAULT = "one group per owner, minMember 1 (default grouper)"
# KAI's podgrouper has no rule nor RBAC for the kind: its walk stops below it (KAI's rule for a forbidden
# owner), without the kind's labels.
_NOT_READ = "no plugin, and no RBAC to read it: the walk stops below it, grouped as the "

KINDS: tuple[Kind, ...] = (
    Kind("", "Pod", "pods", core.pod_rule,
         "bare pod: its own group; pod owned by a pod (Spark executor): the owner's group", _SAME),
    Kind("", "ReplicationController", "replicationcontrollers", core.default_rule, _DEFAULT, _DEFAULT),
    Kind("apps", "Deployment", "deployments", core.deployment_rule,
         "each replica its own job; default priority `inference`",
         "one group per pod; default priority `inference`"),
    Kind("apps", "ReplicaSet", "replicasets", core.default_rule, _DEFAULT, _SAME),
    Kind("apps", "StatefulSet", "statefulsets", core.statefulset_rule,
         "minMember = replicas with podManagementPolicy Parallel, else 1", _DEFAULT),
    Kind("apps", "DaemonSet", "daemonsets", core.default_rule, _DEFAULT, "not listed: default grouper"),
    Kind("batch", "Job", "jobs", core.job_rule,
         "minMember 1; Indexed: min(parallelism, completions left); `batch-min-member` overrides",
         "minMember 1; `batch-min-member` overrides"),
    Kind("batch", "CronJob", "cronjobs", core.cronjob_rule,
         "one group per run, by the Job rule (queue from the jobTemplate)",
         "one group per run (the Job), default grouper"),
    *(
        Kind("kubeflow.org", k, k.lower() + "s", kubeflow.training_rule,
             "sum of replicas; `schedulingPolicy.minAvailable`; queue/priority from `schedulingPolicy`",
             "sum of replicas; `schedulingPolicy.minAvailable`")
        for k in ("TFJob", "XGBoostJob", "JAXJob")
    ),
    Kind("kubeflow.org", "PaddleJob", "paddlejobs", kubeflow.training_rule,
         "sum of replicas; `schedulingPolicy.minAvailable`; queue/priority from `schedulingPolicy`",
         "no plugin, and no RBAC to read it: the walk stops at the pod, each pod its own group (minMember 1)"),
    Kind("kubeflow.org", "PyTorchJob", "pytorchjobs", kubeflow.training_rule,
         "sum of replicas; elastic: `elasticPolicy.minReplicas`; `schedulingPolicy.minAvailable` wins",
         _SAME + " (queue/priority from labels only)"),
    Kind("kubeflow.org", "MPIJob", "mpijobs", kubeflow.training_rule,
         "sum of replicas; `WaitForWorkersReady`: launcher counted once its pod exists", _SAME),
    Kind("kubeflow.org", "Notebook", "notebooks", kubeflow.notebook_rule,
         "one group, minMember 1; default priority `build`", _SAME),
    Kind("kubeflow.org", "ScheduledWorkflow", "scheduledworkflows", core.default_rule, _DEFAULT, _SAME),
    Kind("trainer.kubeflow.org", "TrainJob", "trainjobs", None,
         "skipped: grouped as its JobSet, the TrainJob's labels filling in", _SAME),
    Kind("jobset.x-k8s.io", "JobSet", "jobsets", jobset.jobset_rule,
         "sum of replicas x pods per Job; InOrder/dependsOn: started, unfinished steps only",
         "sub-groups per replicatedJob and replica; InOrder: any one replicatedJob (MinSubGroup 1)"),
    Kind("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets", lws.lws_rule,
         "one group per replica, minMember = size; LeaderReady: 1 until the leader is Ready",
         "same, LeaderReady decided per pod (leader not yet scheduled: 1)"),
    *(
        Kind("ray.io", k, k.lower() + "s", rule, ours, kai)
        for k, rule, ours, kai in (
            ("RayCluster", ray.raycluster_rule, "head + workers (minReplicas when set) x numOfHosts", _SAME),
            ("RayJob", ray.rayjob_rule, "as RayCluster, one group per RayJob", _SAME),
            ("RayService", ray.rayservice_rule, "as RayCluster, one group per RayCluster",
             "one group per RayService, sized from the active cluster"),
        )
    ),
    # A RayCronJob (KubeRay 1.5) owns the RayJob of each run; a DisaggregatedSet (LWS) owns one
    # LeaderWorkerSet per role. Without these entries the walk would stop on them (no RBAC to read them).
    Kind("ray.io", "RayCronJob", "raycronjobs", None,
         "skipped: each run grouped as its RayJob, the RayCronJob's labels filling in", _NOT_READ + "RayJob"),
    Kind("disaggregatedset.x-k8s.io", "DisaggregatedSet", "disaggregatedsets", None,
         "skipped: grouped as its LeaderWorkerSets (one group per role replica), its labels filling in",
         _NOT_READ + "LeaderWorkerSet"),
    *(
        Kind("serving.knative.dev", k, k.lower() + "s", knative.knative_rule,
             "one group per Revision, minMember = min-scale; default priority `inference`", _SAME)
        for k in ("Service", "Configuration", "Revision")
    ),
    Kind("argoproj.io", "Workflow", "workflows", None,
         "skipped: one group per pod (steps run one after another)", _SAME),
    Kind("argoproj.io", "CronWorkflow", "cronworkflows", None,
         "skipped to its Workflow, so one group per pod",
         "no plugin, and no RBAC to read it: the walk stops at its Workflow, which is skipped: one group "
         "per pod"),
    Kind("sparkoperator.k8s.io", "SparkApplication", "sparkapplications", spark.application_rule,
         "one group per application (driver and executors), minMember 1", "not listed: default grouper"),
    Kind("sparkoperator.k8s.io", "ScheduledSparkApplication", "scheduledsparkapplications",
         spark.scheduled_rule, "one group per run (SparkApplication)", "not listed: default grouper"),
    Kind("machinelearning.seldon.io", "SeldonDeployment", "seldondeployments", core.default_rule,
         _DEFAULT, _SAME),
    Kind("kubevirt.io", "VirtualMachineInstance", "virtualmachineinstances", core.default_rule,
         _DEFAULT, _SAME),
    Kind("workspace.devfile.io", "DevWorkspace", "devworkspaces", core.default_rule, _DEFAULT, _SAME),
    *(Kind("tekton.dev", k, k.lower() + "s", core.default_rule, _DEFAULT, _SAME) for k in ("PipelineRun", "TaskRun")),
)  # fmt: skip

_BY_GROUP_KIND = {(k.group, k.kind): k for k in KINDS}
# Kinds whose rule reads the object's status (a Job's succeeded count, a JobSet's steps, a RayJob's cluster):
# for the others a change of status alone cannot change a group.
READS_STATUS = frozenset({("batch", "Job"), ("jobset.x-k8s.io", "JobSet"), ("ray.io", "RayJob")})


def lookup(group: str, kind: str) -> Kind | None:
    return _BY_GROUP_KIND.get((group, kind))


def rbac_rules() -> list[dict[str, object]]:
    """Per API group, the resources of the kinds listed (sorted, stable): what the scheduler may read."""
    groups: dict[str, list[Kind]] = {}
    for k in KINDS:
        groups.setdefault(k.group, []).append(k)
    return [
        {
            "apiGroup": g,
            "resources": sorted({k.plural for k in groups[g]}),
            "kinds": sorted({k.kind for k in groups[g]}),
        }
        for g in sorted(groups)
    ]


def markdown_table() -> str:
    """The table of docs/podgrouper.md."""
    rows = ["| API group | kind | Tessera | KAI Scheduler |", "|---|---|---|---|"]
    for k in KINDS:
        rows.append(f"| `{k.group or 'core'}` | {k.kind} | {k.ours} | {k.kai} |")
    return "\n".join(rows) + "\n"
