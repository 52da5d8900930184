"""KubeRay: RayCluster, RayJob and RayService.

KubeRay owns the head and worker pods by the RayCluster; a RayJob and a RayService own their RayCluster(s)
(a RayJob's submitter pod comes through a batch Job the RayJob owns). minMember is the head plus, per
worker group that is not suspended, `minReplicas` when set (else `replicas`) times `numOfHosts`, as KAI
(which follows KubeRay's own Volcano integration); with `enableInTreeAutoscaling` the autoscaler may run
fewer than `replicas`, so `minReplicas` (possibly 0) counts. The `ray.io/priority-class-name` label on the
top owner names the priority class, as KAI.

- RayCluster and RayJob: one group per top owner, sized from the RayCluster (a RayJob's is named in its
  status; one that cannot be read is sized from `rayClusterSpec`);
- RayService: one group per RayCluster. KAI uses one group per RayService sized from the active cluster;
  but an upgrade starts a second, pending cluster whose pods must start together on their own, which a
  group already running would not enforce.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.kube.podgrouper import policy
from scheduler.kube.podgrouper.model import (
    GroupSpec,
    Obj,
    Workload,
    as_int,
    kind_of,
    labels,
    name_of,
    spec,
    status,
    uid_of,
)
from scheduler.kube.podgrouper.names import group_name

PRIORITY_LABEL = "ray.io/priority-class-name"


def cluster_size(cluster_spec: Mapping[str, Any]) -> int:
    autoscaling = bool(cluster_spec.get("enableInTreeAutoscaling"))
    workers = 0
    for group in cluster_spec.get("workerGroupSpecs") or []:
        if not isinstance(group, Mapping) or group.get("suspend") or group.get("suspended"):
            continue
        desired = as_int(group.get("replicas")) or 0
        minimum = as_int(group.get("minReplicas")) or 0
        count = minimum if autoscaling or minimum > 0 else desired
        hosts = as_int(group.get("numOfHosts"))
        workers += max(0, count) * (1 if hosts is None else max(1, hosts))
    return 1 + workers


def _build(w: Workload, owner: Obj, top: Obj, cluster_spec: Mapping[str, Any]) -> GroupSpec:
    priority = labels(top).get(PRIORITY_LABEL)
    return policy.build(
        w,
        name=group_name(name_of(owner), uid_of(owner)),
        min_member=cluster_size(cluster_spec),
        owner=owner,
        queue_owner=top,
        priority_override=str(priority) if priority and w.priority_class_exists(str(priority)) else None,
        rule=kind_of(top),
    )


def raycluster_rule(w: Workload, cluster: Obj) -> GroupSpec:
    return _build(w, cluster, cluster, spec(cluster))


def rayjob_rule(w: Workload, rayjob: Obj) -> GroupSpec:
    # The submitter pod comes through a batch Job, not the RayCluster: read the cluster by its name in
    # the RayJob's status (as KAI), so every member sizes the group from the same object.
    cluster = w.nearest("RayCluster") or w.read(
        str(rayjob.get("apiVersion") or "ray.io/v1"),
        "RayCluster",
        str(status(rayjob).get("rayClusterName") or ""),
    )
    cluster_spec = spec(cluster) if cluster is not None else spec(rayjob).get("rayClusterSpec") or {}
    return _build(w, rayjob, rayjob, cluster_spec if isinstance(cluster_spec, Mapping) else {})


def rayservice_rule(w: Workload, service: Obj) -> GroupSpec:
    cluster = w.nearest("RayCluster")
    if cluster is None:  # a pod the RayService owns directly: not one KubeRay makes; a group of its own
        config = spec(service).get("rayClusterConfig") or {}
        return _build(w, service, service, config if isinstance(config, Mapping) else {})
    return _build(w, cluster, service, spec(cluster))
