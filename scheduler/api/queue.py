"""The `Queue` CRD (cluster-scoped), with KAI Scheduler's field names and meanings.

Units are what Kubernetes users write on pods, converted once, here, to the scheduler's internal units:

| resource | written as                                                    | held as     |
|----------|---------------------------------------------------------------|-------------|
| gpu      | GPUs, a number (fractions allowed: `2.5`)                     | GPUs        |
| cpu      | cores: an integer (`64`) or a quantity string (`"500m"`, `"0.5"`) | millicores |
| memory   | a quantity string (`"256Gi"`, `"512Mi"`) or an integer of bytes | MiB         |

`-1` means unlimited for `quota` and none for `limit`, whatever the resource. A resource, or a field,
left unset is unlimited: quota -1, limit -1, overQuotaWeight 1. Serializing gives the user's form back
(cores, quantity strings), so a Queue survives a round trip through the API unchanged.

cpu and memory are integer-or-string, as every quantity in a CRD is: the API server rejects a bare
fraction (`cpu: 0.5`) there, so the model does too, with the fix in the message.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    field_serializer,
    field_validator,
    model_validator,
)

from scheduler.api.duration import MinRuntime, seconds
from scheduler.api.keys import API_VERSION
from scheduler.api.limits import (
    MAX_OVER_QUOTA_WEIGHT,
    MAX_PRIORITY,
    MAX_QUEUE_CPU_MILLI,
    MAX_QUEUE_GPUS,
    MAX_QUEUE_MEMORY_MIB,
    MAX_QUEUE_NAMESPACES,
    MIN_PRIORITY,
)
from scheduler.api.meta import ObjectMeta

UNLIMITED = -1
MIB = 1024 * 1024

# Kubernetes' quantity grammar without negatives (only -1, which means unlimited) or negative exponents.
QUANTITY_PATTERN = r"^(-1|\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE]\+?[0-9]+))?)$"
_QUANTITY = re.compile(QUANTITY_PATTERN)
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # a DNS label, as Kubernetes names namespaces
_UNITS = {"cpu": "cores", "memory": "bytes"}
_EXAMPLE = {"cpu": '64 or "500m"', "memory": '"256Gi"'}
# Anything above this (cores or bytes) is out of every queue bound; refused before any arithmetic on it.
_LARGEST = Decimal(2**63)


def _quantity(raw: object, resource: Literal["cpu", "memory"]) -> Decimal:
    """A cpu or memory amount as Kubernetes reads it (cores, bytes); -1 stays -1."""
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        hint = f'; write fractions as a string, e.g. "{raw}"' if isinstance(raw, float) else ""
        raise ValueError(
            f"{resource} must be an integer ({_UNITS[resource]}) or a quantity string like "
            f"{_EXAMPLE[resource]}, not {raw!r}{hint}"
        )
    if isinstance(raw, int):
        if raw < UNLIMITED:
            raise ValueError(f"{resource} must be -1 (unlimited) or >= 0, got {raw}")
        return Decimal(raw)
    text = raw.strip()
    if not _QUANTITY.match(text):
        raise ValueError(
            f"{resource} {raw!r} is not a Kubernetes quantity (e.g. {_EXAMPLE[resource]}), or -1 for unlimited"
        )
    from kubernetes.utils.quantity import parse_quantity  # imported only when a string needs it

    try:
        value = Decimal(parse_quantity(text))
    except (ValueError, ArithmeticError):  # ArithmeticError: decimal's Overflow on a huge exponent
        raise ValueError(f"{resource} {raw!r} is not a Kubernetes quantity") from None
    if not value.is_finite() or value > _LARGEST:
        raise ValueError(f"{resource} {raw[:64]!r} is out of range (scheduler/api/limits.py)")
    return value


def _cpu_in(raw: object) -> object:
    if isinstance(raw, float) and raw == UNLIMITED:
        return float(UNLIMITED)
    value = _quantity(raw, "cpu")
    return float(UNLIMITED) if value == UNLIMITED else float(value * 1000)


def _memory_in(raw: object) -> object:
    if isinstance(raw, float) and raw == UNLIMITED:
        return float(UNLIMITED)
    value = _quantity(raw, "memory")
    return float(UNLIMITED) if value == UNLIMITED else float(value / MIB)


def cpu_out(milli: float) -> int | str:
    """Millicores as a user writes them: whole cores as an integer, else `"<n>m"`."""
    if milli == UNLIMITED:
        return UNLIMITED
    if milli % 1000 == 0:
        return int(milli // 1000)
    return f"{milli:.0f}m" if float(milli).is_integer() else f"{milli / 1000:.9g}"


def memory_out(mib: float) -> int | str:
    """MiB as a quantity string (`"256Gi"`, `"1536Mi"`); a fraction of a MiB as integer bytes."""
    if mib == UNLIMITED:
        return UNLIMITED
    if not float(mib).is_integer():
        return round(mib * MIB)
    whole = int(mib)
    return f"{whole // 1024}Gi" if whole and whole % 1024 == 0 else f"{whole}Mi"


def _amount_schema() -> dict[str, Any]:
    """JSON schema of a cpu/memory amount: Kubernetes' integer-or-string quantity (see scripts/gen_crds.py)."""
    return {"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN, "minimum": UNLIMITED}


CPUAmount = Annotated[
    float,
    BeforeValidator(_cpu_in),
    PlainSerializer(cpu_out, return_type=int | str),
    WithJsonSchema(_amount_schema()),
]
MemoryAmount = Annotated[
    float,
    BeforeValidator(_memory_in),
    PlainSerializer(memory_out, return_type=int | str),
    WithJsonSchema(_amount_schema()),
]


class QueueResource(BaseModel):
    """GPUs of a queue (and the shape of every resource): quota -1 = unlimited deserved share, limit -1 =
    no cap; fractions of a GPU allowed."""

    # Finite numbers only; the largest quota and limit (scheduler/api/limits.py) are checked by
    # `QueueResources`, which knows each resource's unit.
    model_config = ConfigDict(populate_by_name=True, allow_inf_nan=False)

    quota: float = UNLIMITED
    over_quota_weight: float = Field(default=1, ge=0, le=MAX_OVER_QUOTA_WEIGHT, alias="overQuotaWeight")
    limit: float = UNLIMITED

    @model_validator(mode="after")
    def _check(self) -> QueueResource:
        for name in ("quota", "limit"):
            v = getattr(self, name)
            if not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v}")
        if self.quota < 0 and self.quota != UNLIMITED:
            raise ValueError(f"quota must be >= 0 or -1 (unlimited), got {self.quota}")
        if self.limit < 0 and self.limit != UNLIMITED:
            raise ValueError(f"limit must be >= 0 or -1 (none), got {self.limit}")
        if self.limit != UNLIMITED and self.quota != UNLIMITED and self.limit < self.quota:
            raise ValueError(f"limit {self.show(self.limit)} is below quota {self.show(self.quota)}")
        return self

    @staticmethod
    def show(value: float) -> str:
        """An amount in the unit users write."""
        return f"{value:g}"


class CPUQueueResource(QueueResource):
    """CPU of a queue: written in cores (`64`, `"500m"`, `"0.5"`), held in millicores."""

    quota: CPUAmount = UNLIMITED
    limit: CPUAmount = UNLIMITED

    @staticmethod
    def show(value: float) -> str:
        return str(cpu_out(value))


class MemoryQueueResource(QueueResource):
    """Memory of a queue: written as a quantity (`"256Gi"`) or integer bytes, held in MiB."""

    quota: MemoryAmount = UNLIMITED
    limit: MemoryAmount = UNLIMITED

    @staticmethod
    def show(value: float) -> str:
        return str(memory_out(value))


class QueueResources(BaseModel):
    """gpu in GPUs (fractions allowed), cpu in cores, memory as a quantity; unset = unlimited."""

    gpu: QueueResource = Field(default_factory=QueueResource)
    cpu: CPUQueueResource = Field(default_factory=CPUQueueResource)
    memory: MemoryQueueResource = Field(default_factory=MemoryQueueResource)

    @model_validator(mode="after")
    def _bounded(self) -> QueueResources:
        for name, maximum in (
            ("gpu", MAX_QUEUE_GPUS),
            ("cpu", MAX_QUEUE_CPU_MILLI),
            ("memory", MAX_QUEUE_MEMORY_MIB),
        ):
            res: QueueResource = getattr(self, name)
            for field, value in (("quota", res.quota), ("limit", res.limit)):
                if value > maximum:
                    raise ValueError(
                        f"{name}.{field} {value:g} is more than the largest accepted ({maximum:g})"
                    )
        return self


class QueueSpec(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    parent_queue: str | None = Field(default=None, alias="parentQueue")
    priority: int = Field(default=100, ge=MIN_PRIORITY, le=MAX_PRIORITY, strict=True)
    # Who may use it (docs/tenancy.md): unset, every namespace; a parent's list bounds the queues under it.
    namespaces: list[Annotated[str, Field(pattern=NAMESPACE_PATTERN, max_length=63)]] | None = Field(
        default=None,
        max_length=MAX_QUEUE_NAMESPACES,
        description="Namespaces whose pods and PodGroups may use this queue and the queues under it "
        "(unset: every namespace)",
    )
    display_name: str | None = Field(default=None, alias="displayName")
    resources: QueueResources = Field(default_factory=QueueResources)
    # KAI's minimum runtimes (docs/min-runtime.md): unset is inherited from the parent queue, 0 at the root.
    preempt_min_runtime: MinRuntime | None = Field(
        default=None,
        alias="preemptMinRuntime",
        description="How long a job of this queue runs before a job of the same queue may preempt it "
        "(a duration: 30s, 10m, 1h30m; unset: the parent's, 0 at the top)",
    )
    reclaim_min_runtime: MinRuntime | None = Field(
        default=None,
        alias="reclaimMinRuntime",
        description="How long a job of this queue runs before another queue may reclaim it (resolved "
        "below the lowest common ancestor of the two queues, as KAI does; unset: the parent's, 0 at the top)",
    )

    @property
    def preempt_min_runtime_s(self) -> float | None:
        return seconds(self.preempt_min_runtime)

    @property
    def reclaim_min_runtime_s(self) -> float | None:
        return seconds(self.reclaim_min_runtime)


ResourceAmounts = dict[Literal["gpu", "cpu", "memory"], float]


def _amounts_in(raw: Any) -> Any:
    """Status maps as written on the object (GPUs, cores, bytes) -> internal units (GPUs, milli, MiB)."""
    if not isinstance(raw, dict):
        return raw
    out = dict(raw)
    for key, scale in (("cpu", 1000.0), ("memory", 1.0 / MIB)):
        v = out.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[key] = v * scale
    return out


def _amounts_out(amounts: dict[str, float]) -> dict[str, float]:
    out = dict(amounts)
    if "cpu" in out:
        out["cpu"] = out["cpu"] / 1000
    if "memory" in out:
        out["memory"] = round(out["memory"] * MIB)
    return out


class QueueStatus(BaseModel):
    """Written by the scheduler every cycle, as plain numbers: GPUs, CPU cores, memory bytes."""

    # Held in internal units (GPUs, millicores, MiB). Keyword arguments and `model_validate` take the
    # object's form; `from_internal` takes the scheduler's.
    model_config = ConfigDict(populate_by_name=True)

    allocated: dict[str, float] = Field(default_factory=dict)
    requested: dict[str, float] = Field(default_factory=dict)
    fair_share: dict[str, float] = Field(default_factory=dict, alias="fairShare")

    @classmethod
    def from_internal(
        cls, allocated: dict[str, float], requested: dict[str, float], fair_share: dict[str, float]
    ) -> QueueStatus:
        """From the scheduler's own figures (GPUs, CPU millicores, memory MiB), which need no conversion."""
        return cls.model_construct(allocated=allocated, requested=requested, fair_share=fair_share)

    @field_validator("allocated", "requested", "fair_share", mode="before")
    @classmethod
    def _read(cls, raw: Any) -> Any:
        return _amounts_in(raw)

    @field_serializer("allocated", "requested", "fair_share")
    def _write(self, amounts: dict[str, float]) -> dict[str, float]:
        return _amounts_out(amounts)


class Queue(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    api_version: Literal["scheduling.tessera.dev/v1alpha1"] = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["Queue"] = "Queue"
    metadata: ObjectMeta
    spec: QueueSpec = Field(default_factory=QueueSpec)
    status: QueueStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name
