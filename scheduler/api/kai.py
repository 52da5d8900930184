"""KAI Scheduler's `Queue` (scheduling.run.ai/v2) and `PodGroup` (scheduling.run.ai/v2alpha2) as KAI users
write them, translated into Tessera's own `Queue` and `PodGroup` (docs/kai-compat.md has the field map).

KAI's units and defaults are not Tessera's, and the translation is where they meet:

| KAI field                     | KAI unit, unset                 | Tessera                               |
|-------------------------------|---------------------------------|---------------------------------------|
| resources.gpu.{quota,limit}   | GPUs; unset = 0                 | GPUs                                  |
| resources.cpu.{quota,limit}   | millicores; unset = 0           | `"<n>m"`, converted once to millicores |
| resources.memory.{quota,limit}| MB = 10^6 bytes; unset = 0      | `"<n>M"`, converted once to MiB        |
| resources.*.overQuotaWeight   | unset = 0                       | the same number                       |

KAI reads an unset quota, limit or weight as 0 (its Go structs have no defaults): a limit of 0 lets no pod
that asks for the resource in, and KAI's fair share never gives a queue more than its limit, so a quota
above the limit is worth the limit. Tessera writes these numbers out, so the queue behaves as it does under
KAI, and says so in a note; `-1` means unlimited in both. Fields Tessera does not use yet are kept out of
the translation with a note each, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator

from scheduler.api.duration import parse_go_duration
from scheduler.api.keys import (
    API_VERSION,
    DEFAULT_QUEUE,
    KAI_GROUP,
    KAI_QUEUE_LABEL,
    TRANSLATED_FROM,
)
from scheduler.api.meta import ObjectMeta
from scheduler.api.podgroup import PodGroup, PodGroupStatus
from scheduler.api.quantity import parse_quantity
from scheduler.api.queue import MIB, UNLIMITED, Queue, QueueStatus

# KAI_GROUP/KAI_QUEUE_VERSION and KAI_GROUP/KAI_PODGROUP_VERSION, spelled out for typing.
KAI_QUEUE_API_VERSION: Literal["scheduling.run.ai/v2"] = "scheduling.run.ai/v2"
KAI_PODGROUP_API_VERSION: Literal["scheduling.run.ai/v2alpha2"] = "scheduling.run.ai/v2alpha2"
DEFAULT_PRIORITY = 100  # KAI's queue priority when unset, and Tessera's
KAI_NODE_POOL = "default"  # the node pool KAI names in its scheduling conditions when pools are not used
# A negative stalenessGracePeriod means "never evict a stale gang" in KAI; Tessera waits ten years.
NEVER_S = 10 * 365 * 24 * 3600.0
_WHAT = {"gpu": "GPUs", "cpu": "CPU", "memory": "memory"}

Number = Annotated[float, Strict()]  # a JSON number (the CRD's `type: number`), not a string


class KaiQueueResource(BaseModel):
    """One resource of a KAI queue, in KAI's units (GPUs, millicores, MB); unset fields are 0, as in KAI."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    quota: Number = 0
    over_quota_weight: Number = Field(default=0, ge=0, alias="overQuotaWeight")
    limit: Number = 0
    lending_limit: Number | None = Field(default=None, alias="lendingLimit")  # not used by Tessera

    @field_validator("quota", "limit")
    @classmethod
    def _amount(cls, v: float) -> float:
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError(f"must be a finite number, got {v}")
        if v < 0 and v != UNLIMITED:
            raise ValueError(f"must be -1 (unlimited) or >= 0, got {v:g}")
        return v


class KaiQueueResources(BaseModel):
    gpu: KaiQueueResource | None = None
    cpu: KaiQueueResource | None = None
    memory: KaiQueueResource | None = None


class KaiQueueSpec(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="allow")

    display_name: str = Field(default="", alias="displayName")
    parent_queue: str = Field(default="", alias="parentQueue")
    resources: KaiQueueResources | None = None
    priority: int | None = None
    preempt_min_runtime: str | None = Field(default=None, alias="preemptMinRuntime")
    reclaim_min_runtime: str | None = Field(default=None, alias="reclaimMinRuntime")


class KaiQueue(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    api_version: Literal["scheduling.run.ai/v2"] = Field(default=KAI_QUEUE_API_VERSION, alias="apiVersion")
    kind: Literal["Queue"] = "Queue"
    metadata: ObjectMeta
    spec: KaiQueueSpec = Field(default_factory=KaiQueueSpec)


class KaiTopologyConstraint(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    preferred_topology_level: str = Field(default="", alias="preferredTopologyLevel")
    required_topology_level: str = Field(default="", alias="requiredTopologyLevel")
    topology: str = ""

    @property
    def is_set(self) -> bool:
        return bool(self.preferred_topology_level or self.required_topology_level or self.topology)


class KaiSubGroup(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    name: str = Field(min_length=1)
    min_member: int | None = Field(default=None, ge=0, alias="minMember")
    min_sub_group: int | None = Field(default=None, ge=0, alias="minSubGroup")
    parent: str | None = None
    topology_constraint: KaiTopologyConstraint | None = Field(default=None, alias="topologyConstraint")


class KaiPodGroupSpec(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="allow")

    min_member: int | None = Field(default=None, ge=0, alias="minMember")
    min_sub_group: int | None = Field(default=None, ge=0, alias="minSubGroup")  # not used
    queue: str = ""
    priority_class_name: str = Field(default="", alias="priorityClassName")
    preemptibility: Literal["preemptible", "non-preemptible", ""] = ""
    topology_constraint: KaiTopologyConstraint | None = Field(default=None, alias="topologyConstraint")
    sub_groups: list[KaiSubGroup] = Field(default_factory=list, alias="subGroups")  # not used
    mark_unschedulable: bool | None = Field(default=None, alias="markUnschedulable")
    scheduling_backoff: int | None = Field(default=None, alias="schedulingBackoff")  # not used
    preemption_delay: str | None = Field(default=None, alias="preemptionDelay")  # not used
    staleness_grace_period: str | None = Field(default=None, alias="stalenessGracePeriod")


class KaiPodGroup(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    api_version: Literal["scheduling.run.ai/v2alpha2"] = Field(
        default=KAI_PODGROUP_API_VERSION, alias="apiVersion"
    )
    kind: Literal["PodGroup"] = "PodGroup"
    metadata: ObjectMeta
    spec: KaiPodGroupSpec = Field(default_factory=KaiPodGroupSpec)


@dataclass(frozen=True)
class Translation:
    """A Tessera object (a plain dict, as the scheduling cycle takes objects) made from a KAI one, with
    what differs from KAI or is not used, one sentence each, for a Warning event or a simulation warning."""

    kind: Literal["Queue", "PodGroup"]
    obj: dict[str, Any]
    notes: tuple[str, ...] = ()


def is_kai(obj: Mapping[str, Any]) -> bool:
    """True for an object of KAI's API group (whatever its kind)."""
    return str(obj.get("apiVersion") or "").startswith(f"{KAI_GROUP}/")


def translate(obj: Mapping[str, Any]) -> Translation:
    """A KAI Queue or PodGroup as Tessera's; raises ValueError (a pydantic ValidationError included) with
    the reason when the object is not one KAI accepts or not one Tessera can use."""
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if kind == "Queue" and api_version == KAI_QUEUE_API_VERSION:
        return queue_from_kai(obj)
    if kind == "PodGroup" and api_version == KAI_PODGROUP_API_VERSION:
        return podgroup_from_kai(obj)
    raise ValueError(
        f"{api_version} {kind} is not read (KAI compatibility reads {KAI_QUEUE_API_VERSION} Queue and "
        f"{KAI_PODGROUP_API_VERSION} PodGroup)"
    )


# ---- Queue ---------------------------------------------------------------------------------------------
def queue_from_kai(obj: Mapping[str, Any]) -> Translation:
    kq = KaiQueue.model_validate(obj)
    notes: list[str] = []
    spec: dict[str, Any] = {
        "priority": kq.spec.priority if kq.spec.priority is not None else DEFAULT_PRIORITY,
        "resources": {},
    }
    if kq.spec.parent_queue:
        spec["parentQueue"] = kq.spec.parent_queue
    if kq.spec.display_name:
        spec["displayName"] = kq.spec.display_name
    given = kq.spec.resources or KaiQueueResources()
    for name in ("gpu", "cpu", "memory"):
        spec["resources"][name] = _resource(name, getattr(given, name), notes)
    for field, value in (
        ("preemptMinRuntime", kq.spec.preempt_min_runtime),
        ("reclaimMinRuntime", kq.spec.reclaim_min_runtime),
    ):
        if value is not None:  # same name, same meaning (docs/min-runtime.md); validated with the Queue
            spec[field] = value
    notes += _unknown("spec", kq.spec.model_extra)
    out = {
        "apiVersion": API_VERSION,
        "kind": "Queue",
        "metadata": _metadata(obj, KAI_QUEUE_API_VERSION),
        "spec": spec,
    }
    Queue.model_validate(out)  # the translation is a Queue Tessera accepts, or this says why not
    return Translation("Queue", out, tuple(notes))


def _resource(name: str, block: KaiQueueResource | None, notes: list[str]) -> dict[str, Any]:
    if block is None:
        notes.append(
            f"spec.resources.{name} is not set: KAI reads it as quota 0, limit 0 and overQuotaWeight 0, so no "
            f"pod asking for {_WHAT[name]} runs in this queue; write limit: -1 for no limit"
        )
        block = KaiQueueResource()
    quota, limit = block.quota, block.limit
    if limit != UNLIMITED and quota != UNLIMITED and quota > limit:
        notes.append(
            f"spec.resources.{name}: quota {quota:g} is above limit {limit:g} (an unset limit is 0 in KAI); "
            f"KAI never gives a queue more than its limit, so the quota is {limit:g}"
        )
        quota = limit
    elif quota == UNLIMITED and limit != UNLIMITED:
        quota = limit  # KAI's unlimited quota is "everything", which its limit caps
    if block.lending_limit is not None:
        notes.append(
            f"spec.resources.{name}.lendingLimit is not used by Tessera yet: all unused quota is lent"
        )
    notes += _unknown(f"spec.resources.{name}", block.model_extra)
    return {
        "quota": _in_unit(name, quota),
        "limit": _in_unit(name, limit),
        "overQuotaWeight": block.over_quota_weight,
    }


def _in_unit(name: str, value: float) -> float | int | str:
    """A KAI amount as a Tessera Queue field: GPUs as they are, millicores as "<n>m", MB as "<n>M"."""
    if value == UNLIMITED:
        return UNLIMITED
    if name == "gpu":
        return value
    return f"{_plain(value)}{'m' if name == 'cpu' else 'M'}"


def _plain(value: float) -> str:
    """A number without exponent or trailing zeros: 4096.0 -> "4096", 0.25 -> "0.25"."""
    return format(Decimal(repr(float(value))).normalize(), "f")


# ---- PodGroup ------------------------------------------------------------------------------------------
def podgroup_from_kai(obj: Mapping[str, Any]) -> Translation:
    kpg = KaiPodGroup.model_validate(obj)
    s, notes = kpg.spec, []
    min_member = s.min_member or 0
    if not min_member and s.sub_groups:
        parents = {g.parent for g in s.sub_groups if g.parent}
        min_member = sum(g.min_member or 0 for g in s.sub_groups if g.name not in parents)
        notes.append(
            f"spec.subGroups are not used by Tessera yet: the gang is the {min_member} pods the leaf "
            "subgroups' minMember add up to, placed together"
        )
    elif s.sub_groups:
        notes.append(
            f"spec.subGroups are not used by Tessera yet: the gang is minMember ({min_member}) pods placed together"
        )
    if s.min_sub_group is not None:
        notes.append("spec.minSubGroup is not used by Tessera yet")
    labels = kpg.metadata.labels
    queue = s.queue or labels.get(KAI_QUEUE_LABEL) or DEFAULT_QUEUE
    if not s.queue:
        notes.append(f"spec.queue is not set: the gang goes to queue {queue} (KAI would not schedule it)")
    spec: dict[str, Any] = {"minMember": max(min_member, 1), "queue": queue}
    if s.priority_class_name:
        spec["priorityClassName"] = s.priority_class_name
    if s.preemptibility:
        spec["preemptibility"] = s.preemptibility
    if s.staleness_grace_period is not None:
        grace = parse_go_duration(s.staleness_grace_period)
        spec["staleGraceSeconds"] = NEVER_S if grace < 0 else grace
    tc = s.topology_constraint
    if tc and tc.topology:  # the gang's own: Tessera's field, same names (docs/topology.md)
        spec["topologyConstraint"] = tc.model_dump(by_alias=True, exclude_defaults=True)
    elif tc and tc.is_set:
        notes.append("topologyConstraint names no topology: not used (KAI ignores it too)")
    if any(g.topology_constraint and g.topology_constraint.is_set for g in s.sub_groups):
        notes.append("subGroups' topologyConstraint is not used by Tessera yet: only the gang's own is")
    if s.mark_unschedulable is False:
        notes.append("spec.markUnschedulable: false is not honoured: Tessera tells every pending pod why")
    for field, value in (
        ("schedulingBackoff", s.scheduling_backoff),
        ("preemptionDelay", s.preemption_delay),
    ):
        if value is not None:
            notes.append(f"spec.{field} is not used by Tessera yet")
    notes += _unknown("spec", s.model_extra)
    out = {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": _metadata(obj, KAI_PODGROUP_API_VERSION),
        "spec": spec,
    }
    PodGroup.model_validate(out)
    return Translation("PodGroup", out, tuple(notes))


# ---- shared --------------------------------------------------------------------------------------------
def _metadata(obj: Mapping[str, Any], source: str) -> dict[str, Any]:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    meta["annotations"] = {**(meta.get("annotations") or {}), TRANSLATED_FROM: source}
    return meta


def _unknown(where: str, extra: Mapping[str, Any] | None) -> list[str]:
    return [f"{where}.{k} is not known to Tessera; ignored" for k in sorted(extra or {})]


# ---- status, in KAI's shape ----------------------------------------------------------------------------
def _milli_quantity(milli: float) -> str:
    m = round(milli)
    return str(m // 1000) if m % 1000 == 0 else f"{m}m"


def resource_list(amounts: Mapping[str, float]) -> dict[str, str]:
    """Tessera's internal amounts (GPUs, millicores, MiB) as a Kubernetes ResourceList, as KAI's status
    holds them (`nvidia.com/gpu`, `cpu`, `memory` quantities)."""
    out: dict[str, str] = {}
    if "gpu" in amounts:
        out["nvidia.com/gpu"] = _milli_quantity(amounts["gpu"] * 1000)
    if "cpu" in amounts:
        out["cpu"] = _milli_quantity(amounts["cpu"])
    if "memory" in amounts:
        out["memory"] = str(round(amounts["memory"] * MIB))
    return out


def status_from_kai(status: Mapping[str, Any] | None) -> QueueStatus:
    """Tessera's view of a KAI Queue's `status` as Tessera writes it (the inverse of `kai_queue_status`:
    allocated and requested ResourceLists back to GPUs, millicores and MiB); what cannot be read is left
    out. KAI's Queue holds no fair share."""
    out: dict[str, dict[str, float]] = {"allocated": {}, "requested": {}}
    for field in out:
        amounts = (status or {}).get(field)
        if not isinstance(amounts, Mapping):
            continue
        for key, resource, scale in (
            ("nvidia.com/gpu", "gpu", Decimal(1)),
            ("cpu", "cpu", Decimal(1000)),
            ("memory", "memory", Decimal(1) / MIB),
        ):
            if key in amounts:
                try:
                    out[field][resource] = float(parse_quantity(amounts[key]) * scale)
                except ValueError:
                    continue
    return QueueStatus.from_internal(allocated=out["allocated"], requested=out["requested"], fair_share={})


def kai_queue_status(status: QueueStatus, children: Iterable[str]) -> dict[str, Any]:
    """A KAI Queue's `status` (allocated, requested, childQueues) from Tessera's. KAI's Queue has no fair
    share field: `tessera queues` shows it."""
    kids = sorted(set(children))
    return {
        "allocated": resource_list(status.allocated),
        "requested": resource_list(status.requested),
        "childQueues": kids or None,  # None removes the field (merge patch)
    }


def kai_podgroup_status(
    status: PodGroupStatus, previous: list[Mapping[str, Any]] | None, now: str
) -> dict[str, Any]:
    """A KAI PodGroup's `status.schedulingConditions` from Tessera's status: one UnschedulableOnNodePool
    condition while the gang waits (Tessera's reason in `reasons`), none once it runs, as KAI does.
    `previous` is the object's current list: the transitionID counts changes, as KAI's does."""
    waiting = next((c for c in status.conditions if c.status == "False"), None)
    if status.phase != "Unschedulable" or waiting is None:
        return {"schedulingConditions": None}
    last = previous[-1] if previous else None
    same = (
        last is not None
        and last.get("type") == "UnschedulableOnNodePool"
        and last.get("message") == waiting.message
        and [r.get("reason") for r in last.get("reasons") or []] == [waiting.reason]
    )
    try:
        last_id = int(str((last or {}).get("transitionID") or 0))
    except ValueError:
        last_id = 0
    condition = {
        "type": "UnschedulableOnNodePool",
        "nodePool": KAI_NODE_POOL,
        "reason": "Unschedulable",
        "message": waiting.message,
        "status": "True",
        "transitionID": str(last_id if same else last_id + 1),
        "lastTransitionTime": (last or {}).get("lastTransitionTime") if same else now,
        "reasons": [{"reason": waiting.reason, "message": waiting.message}],
    }
    return {"schedulingConditions": [condition]}
