"""LeaderWorkerSet: one group per replica (a leader and its workers).

How the LWS controller makes them: a leader StatefulSet (owned by the LWS) creates one leader pod per
replica, labelled `leaderworkerset.sigs.k8s.io/group-index` and `worker-index: "0"`; for each leader pod
the LWS pod controller creates a worker StatefulSet *owned by the leader pod* (a core-group owner), whose
pods carry the same group index. The walk from a worker goes worker -> StatefulSet -> leader Pod ->
StatefulSet -> LeaderWorkerSet, so leader and workers of a replica meet in `pg-<lws>-<uid>-group-<i>`.

minMember is the group size (`leaderworkerset.sigs.k8s.io/size` on the pod, i.e. the size of the pod's
revision, else `leaderWorkerTemplate.size`), except with `startupPolicy: LeaderReady`: there the worker
StatefulSet is created only once the leader pod is Ready, so until then the group is the leader alone
(minMember 1). KAI decides this per pod (leader not yet scheduled: 1); here it is decided for the group
(leader Ready, or workers already exist), so whichever member is seen last the answer is the same.
"""

from __future__ import annotations

from scheduler.kube.podgrouper import policy
from scheduler.kube.podgrouper.model import (
    GroupSpec,
    Obj,
    Workload,
    annotations_of,
    as_int,
    dig,
    is_ready,
    labels,
    name_of,
    spec,
    uid_of,
)
from scheduler.kube.podgrouper.names import group_name

GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
SIZE = "leaderworkerset.sigs.k8s.io/size"
LEADER_READY = "LeaderReady"


def _is_leader(pod: Obj) -> bool:
    return labels(pod).get(WORKER_INDEX) == "0"


def lws_rule(w: Workload, lws: Obj) -> GroupSpec:
    index = labels(w.pod).get(GROUP_INDEX)
    name = group_name(name_of(lws), uid_of(lws), f"group-{index}" if index is not None else "")
    size = as_int(annotations_of(w.pod).get(SIZE))
    if size is None:
        size = as_int(dig(lws, "spec", "leaderWorkerTemplate", "size")) or 1
    min_member = size
    if spec(lws).get("startupPolicy") == LEADER_READY:
        members = w.members(name)
        started = any(not _is_leader(p) or is_ready(p) for p in members)
        min_member = size if started else 1
    return policy.build(w, name=name, min_member=min_member, owner=lws)
