"""What every rule shares: queue, priority class, preemptibility and grace period of a group, read from the
labels and annotations users put on a workload or its pods (KAI Scheduler's keys), and the assembly of a
`GroupSpec` from them.

- queue: the group owner's `tessera.dev/queue` (or `kai.scheduler/queue`) label, then a workload field the
  rule passes (Kubeflow's `schedulingPolicy.queue`), then the pod's label, else `default`;
- priority class: a `priorityClassName` label on an owner (nearest first), then a workload field
  (`schedulingPolicy.priorityClass`), then the pod's `priorityClassName` label and
  `spec.priorityClassName`, else the kind's default (`train`, `build`, `inference`, as KAI). A name that
  is not an existing PriorityClass is skipped with a warning, as KAI does;
- preemptibility: a `kai.scheduler/preemptibility` label (`preemptible` / `non-preemptible`) on an owner,
  nearest first, then on the pod; none = decided by the priority's value;
- stale grace period: a `kai.scheduler/staleness-grace-period` annotation (`90s`, `5m`) on an owner, then
  on the pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scheduler.api.duration import parse_duration
from scheduler.api.keys import DEFAULT_QUEUE, KAI_QUEUE_LABEL, QUEUE_LABEL
from scheduler.api.topology import constraint_from_annotations
from scheduler.kube.podgrouper.model import (
    GroupSpec,
    Obj,
    OwnerRef,
    Workload,
    annotations_of,
    as_int,
    kind_of,
    labels,
    name_of,
    spec,
)

QUEUE_KEYS = (QUEUE_LABEL, KAI_QUEUE_LABEL)
PRIORITY_LABEL = "priorityClassName"
PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
STALE_GRACE_ANNOTATION = "kai.scheduler/staleness-grace-period"
BATCH_MIN_MEMBER = "kai.scheduler/batch-min-member"
SKIP_ANNOTATION = "kai.scheduler/skip-podgrouper"
PREEMPTIBILITIES = ("preemptible", "non-preemptible")

TRAIN, BUILD, INFERENCE = "train", "build", "inference"


def _where(obj: Obj) -> str:
    return f"{kind_of(obj) or 'Pod'} {name_of(obj)}"


def queue_of(w: Workload, owner: Obj, hint: object = None) -> str:
    for key in QUEUE_KEYS:
        if labels(owner).get(key):
            return str(labels(owner)[key])
    if isinstance(hint, str) and hint:
        return hint
    for key in QUEUE_KEYS:
        if labels(w.pod).get(key):
            return str(labels(w.pod)[key])
    return DEFAULT_QUEUE


def priority_of(w: Workload, owners: Sequence[Obj], default: str, hint: object, warnings: list[str]) -> str:
    candidates: list[tuple[object, str]] = [(labels(o).get(PRIORITY_LABEL), _where(o)) for o in owners]
    candidates.append((hint, "the workload's scheduling policy"))
    candidates.append((labels(w.pod).get(PRIORITY_LABEL), f"the pod's {PRIORITY_LABEL} label"))
    candidates.append((spec(w.pod).get("priorityClassName"), "the pod's spec.priorityClassName"))
    for value, where in candidates:
        if not isinstance(value, str) or not value:
            continue
        if w.priority_class_exists(value):
            return value
        warnings.append(f"PriorityClass {value!r} named on {where} does not exist; ignored")
    return default


def preemptibility_of(w: Workload, owners: Iterable[Obj], warnings: list[str]) -> str | None:
    for obj in (*owners, w.pod):
        value = labels(obj).get(PREEMPTIBILITY_LABEL)
        if value is None:
            continue
        if value in PREEMPTIBILITIES:
            return str(value)
        warnings.append(
            f"{PREEMPTIBILITY_LABEL}={value!r} on {_where(obj)} must be preemptible or non-preemptible; ignored"
        )
    return None


def stale_grace_of(w: Workload, owners: Iterable[Obj], warnings: list[str]) -> float | None:
    for obj in (*owners, w.pod):
        value = annotations_of(obj).get(STALE_GRACE_ANNOTATION)
        if value is None:
            continue
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            warnings.append(f"{STALE_GRACE_ANNOTATION} on {_where(obj)}: {exc}; ignored")
    return None


def topology_of(w: Workload, owners: Iterable[Obj]) -> dict[str, str] | None:
    """The topology constraint the workload's annotations state (`tessera.dev/topology...` or KAI's
    `kai.scheduler/topology...`), from the top owner down to the pod, as KAI's podgrouper reads it."""
    for obj in (*reversed(tuple(owners)), w.pod):
        c = constraint_from_annotations(annotations_of(obj))
        if c is not None:
            return c.model_dump(by_alias=True, exclude_none=True)
    return None


def min_member_override(obj: Obj, warnings: list[str], key: str = BATCH_MIN_MEMBER) -> int | None:
    """A positive `kai.scheduler/batch-min-member` annotation on `obj`, or None (invalid: warned)."""
    raw = annotations_of(obj).get(key)
    if raw is None:
        return None
    value = as_int(raw)
    if value is None or value < 1:
        warnings.append(f"{key}={raw!r} on {_where(obj)} must be a positive integer; ignored")
        return None
    return value


def build(
    w: Workload,
    *,
    name: str,
    min_member: int,
    owner: Obj,
    default_priority: str = TRAIN,
    queue_owner: Obj | None = None,
    queue_hint: object = None,
    priority_hint: object = None,
    priority_override: str | None = None,
    warnings: Sequence[str] = (),
    rule: str = "",
) -> GroupSpec:
    """A group named `name`, owned by `owner`, with the shared attributes read from the pod's owners."""
    notes = list(warnings)
    owners = w.chain
    priority = priority_override or priority_of(w, owners, default_priority, priority_hint, notes)
    return GroupSpec(
        name=name,
        namespace=w.namespace,
        min_member=max(1, min_member),
        queue=queue_of(w, queue_owner if queue_owner is not None else owner, queue_hint),
        priority_class=priority,
        owner=OwnerRef.of(owner),
        preemptibility=preemptibility_of(w, owners, notes),
        stale_grace_s=stale_grace_of(w, owners, notes),
        topology=topology_of(w, owners),
        rule=rule or kind_of(owner) or "Pod",
        warnings=tuple(notes),
    )
