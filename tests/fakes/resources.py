"""The resource types the fake API server serves: built-in ones and registered custom resources."""

from __future__ import annotations

from dataclasses import dataclass, field

_META_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    # With a status subresource, writes to the object ignore `status` and `/status` writes change only it.
    status_subresource: bool = False
    # Built-in types accept strategic merge patches; custom resources answer 415, as a real server does.
    builtin: bool = True
    field_labels: frozenset[str] = field(default=_META_FIELDS)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)


_POD_FIELDS = _META_FIELDS | {
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
}
_EVENT_FIELDS = _META_FIELDS | {
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
}


def builtin_types() -> list[ResourceType]:
    return [
        ResourceType("", "v1", "pods", "Pod", True, True, field_labels=frozenset(_POD_FIELDS)),
        ResourceType(
            "", "v1", "nodes", "Node", False, True, field_labels=_META_FIELDS | {"spec.unschedulable"}
        ),
        ResourceType(
            "", "v1", "namespaces", "Namespace", False, True, field_labels=_META_FIELDS | {"status.phase"}
        ),
        ResourceType("", "v1", "events", "Event", True, field_labels=frozenset(_EVENT_FIELDS)),
        ResourceType("", "v1", "configmaps", "ConfigMap", True),
        ResourceType("", "v1", "secrets", "Secret", True),
        ResourceType("", "v1", "services", "Service", True, True),
        ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True),
        ResourceType("events.k8s.io", "v1", "events", "Event", True),
        ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
        ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False),
        ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, True),
        ResourceType("apps", "v1", "deployments", "Deployment", True, True),
        ResourceType("apps", "v1", "replicasets", "ReplicaSet", True, True),
        ResourceType("apps", "v1", "statefulsets", "StatefulSet", True, True),
        ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, True),
        ResourceType("batch", "v1", "jobs", "Job", True, True),
        ResourceType("batch", "v1", "cronjobs", "CronJob", True, True),
    ]


TESSERA_GROUP = "scheduling.tessera.dev"
TESSERA_VERSION = "v1alpha1"


def tessera_types() -> list[ResourceType]:
    """Tessera's CRDs as deploy/ declares them: all with a status subresource; only PodGroup is namespaced."""
    return [
        ResourceType(TESSERA_GROUP, TESSERA_VERSION, "queues", "Queue", False, True, builtin=False),
        ResourceType(TESSERA_GROUP, TESSERA_VERSION, "podgroups", "PodGroup", True, True, builtin=False),
        ResourceType(
            TESSERA_GROUP, TESSERA_VERSION, "gpunodereports", "GPUNodeReport", False, True, builtin=False
        ),
    ]


def workload_types() -> list[ResourceType]:
    """Third-party workload CRDs the podgrouper understands (Kubeflow, Ray, JobSet, LWS, Argo)."""
    crd = [
        ("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
        ("kubeflow.org", "v1", "tfjobs", "TFJob"),
        ("kubeflow.org", "v2beta1", "mpijobs", "MPIJob"),
        ("kubeflow.org", "v1", "jaxjobs", "JAXJob"),
        ("kubeflow.org", "v1", "xgboostjobs", "XGBoostJob"),
        ("ray.io", "v1", "rayclusters", "RayCluster"),
        ("ray.io", "v1", "rayjobs", "RayJob"),
        ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
        ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet"),
        ("argoproj.io", "v1alpha1", "workflows", "Workflow"),
    ]
    return [ResourceType(g, v, p, k, True, True, builtin=False) for g, v, p, k in crd]
