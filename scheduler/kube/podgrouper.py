"""Podgrouper: every pod of ours belongs to a PodGroup, derived from its top owner.

`group_for_pod` walks the controller ownerReferences up (through an `OwnerLookup`) and asks the rule of
the top owner's kind for the group: its name, minMember, queue and priority class. The rules are pure
functions over owner dicts:

- Pod without owner, Deployment/ReplicaSet, Argo Workflow: one group per pod, minMember 1 (replicas and
  workflow steps run independently; a gang over them would deadlock sequential steps);
- Job: one group, minMember 1, or parallelism for Indexed Jobs that run all indexes at once;
- CronJob: one group per Job run (each run is its own workload);
- StatefulSet: minMember = replicas with podManagementPolicy Parallel, else 1 (OrderedReady creates pods
  one at a time, a gang would never form);
- Kubeflow PyTorchJob/TFJob/MPIJob/JAXJob/XGBoostJob: sum of the replica specs, or
  runPolicy.schedulingPolicy.minAvailable; queue and priority class from schedulingPolicy when set;
- Ray RayCluster/RayJob: head + workers (minReplicas when autoscaling);
- JobSet: sum over replicatedJobs of replicas x parallelism;
- LeaderWorkerSet: one group per replica (leader + workers), minMember = size;
- unknown kinds: one group per top owner, minMember 1.
Queue: the top owner's queue label, else the pod's, else `default`. A pod that names its PodGroup
(`tessera.dev/pod-group` or KAI's `pod-group-name`) joins that group instead.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.api.keys import DEFAULT_QUEUE, KAI_POD_GROUP, KAI_QUEUE_LABEL, POD_GROUP, QUEUE_LABEL

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
# (namespace, apiVersion, kind, name) -> the owner object, or None when it cannot be read.
OwnerLookup = Callable[[str, str, str, str], Obj | None]

LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
MAX_OWNER_DEPTH = 8


@dataclass(frozen=True)
class OwnerRef:
    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True)
class GroupSpec:
    name: str
    namespace: str
    min_member: int
    queue: str
    priority_class: str | None
    owner: OwnerRef | None  # the PodGroup's owner (garbage-collected with it); None for user-named groups
    explicit: bool = False  # named by the pod: the user manages it, the podgrouper does not create it

    def to_podgroup(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if self.owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": self.owner.api_version,
                    "kind": self.owner.kind,
                    "name": self.owner.name,
                    "uid": self.owner.uid,
                    "controller": False,
                    "blockOwnerDeletion": False,
                }
            ]
        spec: dict[str, Any] = {"minMember": self.min_member, "queue": self.queue}
        if self.priority_class:
            spec["priorityClassName"] = self.priority_class
        return {
            "apiVersion": "scheduling.tessera.dev/v1alpha1",
            "kind": "PodGroup",
            "metadata": meta,
            "spec": spec,
        }


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _ref(obj: Obj) -> OwnerRef:
    meta = _meta(obj)
    return OwnerRef(
        str(obj.get("apiVersion", "v1")),
        str(obj.get("kind", "Pod")),
        str(meta.get("name")),
        str(meta.get("uid", "")),
    )


def _controller_ref(obj: Obj) -> Mapping[str, Any] | None:
    refs = _meta(obj).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), refs[0] if refs else None)


def _int(value: Any, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def group_name(*parts: str) -> str:
    """A DNS-1123 name (<= 63 chars, as KAI's `pg-<owner>-<uid>`)."""
    raw = "-".join(p for p in parts if p).lower()
    name = re.sub(r"[^a-z0-9-]+", "-", raw).strip("-")
    return name[:63].rstrip("-") or "pg"


def owner_chain(pod: Obj, lookup: OwnerLookup) -> list[Obj]:
    """The pod's controllers from the nearest to the top; stops where an owner cannot be read."""
    chain: list[Obj] = []
    namespace = str(_meta(pod).get("namespace") or "default")
    current: Obj = pod
    for _ in range(MAX_OWNER_DEPTH):
        ref = _controller_ref(current)
        if ref is None:
            break
        owner = lookup(
            namespace, str(ref.get("apiVersion", "")), str(ref.get("kind", "")), str(ref.get("name"))
        )
        if owner is None:
            # Unreadable owner: still group by it, from the reference alone.
            chain.append(
                {
                    "apiVersion": ref.get("apiVersion"),
                    "kind": ref.get("kind"),
                    "metadata": {"name": ref.get("name"), "uid": ref.get("uid", ""), "namespace": namespace},
                }
            )
            break
        chain.append(owner)
        current = owner
    return chain


def _queue(pod: Obj, owner: Obj | None, fallback: str | None = None) -> str:
    for obj in (owner, pod):
        if obj is None:
            continue
        labels = _meta(obj).get("labels") or {}
        for key in (QUEUE_LABEL, KAI_QUEUE_LABEL):
            if labels.get(key):
                return str(labels[key])
    return fallback or DEFAULT_QUEUE


def _priority(pod: Obj, fallback: str | None = None) -> str | None:
    return fallback or (pod.get("spec") or {}).get("priorityClassName")


def _replica_sum(specs: Any) -> int:
    if not isinstance(specs, Mapping):
        return 1
    return max(1, sum(_int((s or {}).get("replicas"), 1) for s in specs.values()))


_KUBEFLOW_REPLICA_FIELDS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
}


def _kubeflow(owner: Obj) -> tuple[int, str | None, str | None]:
    spec = owner.get("spec") or {}
    policy = (spec.get("runPolicy") or {}).get("schedulingPolicy") or {}
    total = _replica_sum(spec.get(_KUBEFLOW_REPLICA_FIELDS[str(owner.get("kind"))]))
    return _int(policy.get("minAvailable"), total), policy.get("queue"), policy.get("priorityClass")


def _ray_cluster_size(cluster_spec: Mapping[str, Any]) -> int:
    autoscaling = bool(cluster_spec.get("enableInTreeAutoscaling"))
    workers = 0
    for group in cluster_spec.get("workerGroupSpecs") or []:
        count = _int(group.get("minReplicas"), 0) if autoscaling else _int(group.get("replicas"), 1)
        workers += count * max(1, _int(group.get("numOfHosts"), 1))
    return 1 + workers


def _jobset_size(spec: Mapping[str, Any]) -> int:
    total = 0
    for rj in spec.get("replicatedJobs") or []:
        job_spec = ((rj.get("template") or {}).get("spec")) or {}
        total += _int(rj.get("replicas"), 1) * max(1, _int(job_spec.get("parallelism"), 1))
    return max(1, total)


def group_for_pod(pod: Obj, lookup: OwnerLookup) -> GroupSpec:
    meta = _meta(pod)
    namespace = str(meta.get("namespace") or "default")
    annotations = meta.get("annotations") or {}
    named = annotations.get(POD_GROUP) or annotations.get(KAI_POD_GROUP)
    if named:
        return GroupSpec(str(named), namespace, 1, _queue(pod, None), _priority(pod), None, explicit=True)
    chain = owner_chain(pod, lookup)
    return group_for_chain(pod, chain)


def group_for_chain(pod: Obj, chain: list[Obj]) -> GroupSpec:
    """The group for a pod given its controllers (nearest first). Pure: no API calls."""
    meta = _meta(pod)
    namespace = str(meta.get("namespace") or "default")
    if not chain:
        return _single(pod, namespace)
    top = chain[-1]
    kind = str(top.get("kind"))
    top_meta, spec = _meta(top), top.get("spec") or {}

    def whole(min_member: int, queue: str | None = None, priority: str | None = None) -> GroupSpec:
        return GroupSpec(
            group_name("pg", str(top_meta.get("name")), str(top_meta.get("uid", ""))[:8]),
            namespace,
            max(1, min_member),
            _queue(pod, top, queue),
            _priority(pod, priority),
            _ref(top),
        )

    if kind in ("Deployment", "ReplicaSet") or kind == "Workflow":
        return _single(pod, namespace, queue_owner=top)
    if kind == "Job":
        if spec.get("completionMode") == "Indexed":
            parallel = _int(spec.get("parallelism"), 1)
            return whole(min(parallel, _int(spec.get("completions"), parallel)))
        return whole(1)
    if kind == "CronJob":
        job = chain[-2] if len(chain) >= 2 else top
        job_meta = _meta(job)
        return GroupSpec(
            group_name("pg", str(job_meta.get("name")), str(job_meta.get("uid", ""))[:8]),
            namespace,
            1,
            _queue(pod, top),
            _priority(pod),
            _ref(job),
        )
    if kind == "StatefulSet":
        parallel = spec.get("podManagementPolicy") == "Parallel"
        return whole(_int(spec.get("replicas"), 1) if parallel else 1)
    if kind in _KUBEFLOW_REPLICA_FIELDS:
        size, queue, priority = _kubeflow(top)
        return whole(size, queue, priority)
    if kind == "RayCluster":
        return whole(_ray_cluster_size(spec))
    if kind == "RayJob":
        return whole(_ray_cluster_size(spec.get("rayClusterSpec") or {}))
    if kind == "JobSet":
        return whole(_jobset_size(spec))
    if kind == "LeaderWorkerSet":
        index = str((meta.get("labels") or {}).get(LWS_GROUP_INDEX, "0"))
        size = _int((spec.get("leaderWorkerTemplate") or {}).get("size"), 1)
        return GroupSpec(
            group_name("pg", str(top_meta.get("name")), index, str(top_meta.get("uid", ""))[:8]),
            namespace,
            max(1, size),
            _queue(pod, top),
            _priority(pod),
            _ref(top),
        )
    log.debug("unknown owner kind %s: one group per owner", kind)
    return whole(1)


def _single(pod: Obj, namespace: str, queue_owner: Obj | None = None) -> GroupSpec:
    meta = _meta(pod)
    return GroupSpec(
        group_name("pg", str(meta.get("name")), str(meta.get("uid", ""))[:8]),
        namespace,
        1,
        _queue(pod, queue_owner),
        _priority(pod),
        _ref(pod),
    )
