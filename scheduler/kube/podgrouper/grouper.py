"""From a pod and its owner chain to its group: the entry point of the rules (pure: no API calls).

- a pod that names its PodGroup (`tessera.dev/pod-group`, KAI's `pod-group-name`) joins it: the user
  manages that group;
- `kai.scheduler/skip-podgrouper: "true"` on the pod or an owner: no group (the pod is its own job);
- otherwise the rule of the top owner's kind (`kinds.py`); a skipped kind (TrainJob, Argo Workflow) hands
  the pod to the owner below it, whose labels and annotations it fills in where that owner has none;
  an unknown kind gets one group per owner with minMember 1;
- where the walk stops on an owner it may not read (a kind the chart's RBAC does not grant: an operator's
  kind above a known one, as a RayCronJob above its RayJobs), the owner below it is the top owner when
  its kind has a rule (as KAI's podgrouper does for a forbidden owner), so the gang is not lost; else, and
  for an owner that is gone, one group per owner reference with minMember 1. Either way the pod is told
  (a `PodGrouperWarning`), since the refused kind's labels were not read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from scheduler.api.keys import KAI_POD_GROUP, POD_GROUP
from scheduler.kube.podgrouper import core, kinds, policy
from scheduler.kube.podgrouper.model import (
    GroupSpec,
    MemberView,
    Obj,
    Reader,
    Workload,
    annotations_of,
    api_group,
    kind_of,
    labels,
    meta,
    spec,
)
from scheduler.kube.podgrouper.walk import Chain


def explicit_group(pod: Obj) -> GroupSpec | None:
    named = annotations_of(pod).get(POD_GROUP) or annotations_of(pod).get(KAI_POD_GROUP)
    if not named:
        return None
    return GroupSpec(
        name=str(named),
        namespace=str(meta(pod).get("namespace") or "default"),
        min_member=1,
        queue=policy.queue_of(Workload(pod), {}),
        priority_class=spec(pod).get("priorityClassName"),
        owner=None,
        explicit=True,
        rule="explicit",
    )


def skipped(pod: Obj, chain: Sequence[Obj]) -> bool:
    return any(annotations_of(o).get(policy.SKIP_ANNOTATION) == "true" for o in (pod, *chain))


def group_for_pod(
    pod: Obj,
    chain: Chain,
    *,
    members: MemberView = lambda _name: (),
    priority_class_exists: Callable[[str], bool] = lambda _name: True,
    reader: Reader = lambda _ns, _av, _kind, _name: None,
) -> GroupSpec | None:
    """The pod's group, or None when the podgrouper must leave it alone."""
    named = explicit_group(pod)
    if named is not None:
        return named
    if skipped(pod, chain.owners):
        return None
    w = Workload(pod, chain.owners, members, priority_class_exists, reader)
    if not chain.complete:
        top = w.top
        unread = f"could not read {kind_of(top)} {meta(top).get('name')}: {chain.problem}"
        below = w.chain[-2] if len(w.chain) > 1 else None
        if (
            below is not None
            and chain.problem.startswith("forbidden")
            and kinds.lookup(api_group(below), kind_of(below)) is not None
        ):
            g = dispatch(replace(w, chain=w.chain[:-1]))
            note = f"{unread}; grouped as the {kind_of(below)} below it (its labels unread)"
            return replace(g, warnings=(*g.warnings, note))
        note = f"{unread}; grouped by its reference alone (minMember 1, its labels unread)"
        return replace(core.per_owner(w, top), warnings=(note,), rule=kind_of(top))
    return dispatch(w)


def dispatch(w: Workload) -> GroupSpec:
    if not w.chain:
        return core.pod_rule(w, w.pod)
    top = w.top
    kind = kinds.lookup(api_group(top), kind_of(top))
    if kind is None:
        return core.per_owner(w, top)
    if kind.rule is None:
        return dispatch(_skip_top(w))
    return kind.rule(w, top)


def _fill_in(lower: Obj, upper: Obj) -> dict[str, object]:
    """`lower` with `upper`'s labels and annotations where it has none of its own."""
    m = dict(meta(lower))
    m["labels"] = {**labels(upper), **labels(lower)}
    m["annotations"] = {**annotations_of(upper), **annotations_of(lower)}
    return {**lower, "metadata": m}


def _skip_top(w: Workload) -> Workload:
    top = w.chain[-1]
    if len(w.chain) == 1:
        return replace(w, pod=_fill_in(w.pod, top), chain=())
    return replace(w, chain=(*w.chain[:-2], _fill_in(w.chain[-2], top)))
