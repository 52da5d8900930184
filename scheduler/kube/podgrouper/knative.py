"""Knative Serving: one group per Revision, minMember = its `autoscaling.knative.dev/min-scale`.

How Knative makes the pods: Service -> Configuration -> Revision -> Deployment -> ReplicaSet -> Pod, every
pod labelled `serving.knative.dev/revision`. A revision must keep `min-scale` pods up, so those start as a
gang (KAI's default, `--knative-gang-schedule`); pods the autoscaler adds above it join a running group.
Default priority `inference`. The queue label is read from the Revision, then from the top owner (the
Service), then from the pod.
"""

from __future__ import annotations

from scheduler.kube.podgrouper import policy
from scheduler.kube.podgrouper.core import per_pod
from scheduler.kube.podgrouper.model import (
    GroupSpec,
    Obj,
    Workload,
    annotations_of,
    as_int,
    kind_of,
    labels,
    name_of,
    uid_of,
)
from scheduler.kube.podgrouper.names import group_name

REVISION_LABEL = "serving.knative.dev/revision"
MIN_SCALE = ("autoscaling.knative.dev/min-scale", "autoscaling.knative.dev/minScale")
API_VERSION = "serving.knative.dev/v1"


def _min_scale(revision: Obj, warnings: list[str]) -> int:
    for key in MIN_SCALE:
        raw = annotations_of(revision).get(key)
        if raw is None:
            continue
        value = as_int(raw)
        if value is None or value < 0:
            warnings.append(f"{key}={raw!r} on Revision {name_of(revision)} is not a count; minMember 1")
            return 1
        return max(1, value)
    return 1


def knative_rule(w: Workload, top: Obj) -> GroupSpec:
    revision = top if kind_of(top) == "Revision" else w.nearest("Revision")
    if revision is None:
        revision = w.read(API_VERSION, "Revision", str(labels(w.pod).get(REVISION_LABEL) or ""))
    if revision is None:  # not a pod Knative made (or its Revision is gone): on its own, as a service pod
        return per_pod(w, top, default_priority=policy.INFERENCE)
    warnings: list[str] = []
    queue_owner = {"metadata": {"labels": {**labels(top), **labels(revision)}}}
    return policy.build(
        w,
        name=group_name(name_of(revision), uid_of(revision)),
        min_member=_min_scale(revision, warnings),
        owner=revision,
        queue_owner=queue_owner,
        default_priority=policy.INFERENCE,
        warnings=warnings,
        rule="Knative",
    )
