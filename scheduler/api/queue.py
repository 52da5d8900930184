"""The `Queue` CRD (cluster-scoped), with KAI Scheduler's field names and meanings."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from scheduler.api.keys import API_VERSION
from scheduler.api.limits import (
    MAX_OVER_QUOTA_WEIGHT,
    MAX_PRIORITY,
    MAX_QUEUE_CPU_MILLI,
    MAX_QUEUE_GPUS,
    MAX_QUEUE_MEMORY_MIB,
    MIN_PRIORITY,
)
from scheduler.api.meta import ObjectMeta

UNLIMITED = -1


class QueueResource(BaseModel):
    """One resource of a queue. quota -1 = unlimited deserved share; limit -1 = no cap."""

    # Finite numbers only; the largest quota and limit (scheduler/api/limits.py) are checked by
    # `QueueResources`, which knows each resource's unit.
    model_config = ConfigDict(populate_by_name=True, allow_inf_nan=False)

    quota: float = 0
    over_quota_weight: float = Field(default=1, ge=0, le=MAX_OVER_QUOTA_WEIGHT, alias="overQuotaWeight")
    limit: float = UNLIMITED

    @model_validator(mode="after")
    def _check(self) -> QueueResource:
        if self.quota < 0 and self.quota != UNLIMITED:
            raise ValueError(f"quota must be >= 0 or -1 (unlimited), got {self.quota}")
        if self.limit < 0 and self.limit != UNLIMITED:
            raise ValueError(f"limit must be >= 0 or -1 (none), got {self.limit}")
        if self.limit != UNLIMITED and self.quota != UNLIMITED and self.limit < self.quota:
            raise ValueError(f"limit {self.limit} is below quota {self.quota}")
        return self


class QueueResources(BaseModel):
    """Units as in KAI Scheduler's Queue: gpu in GPUs (fractions allowed), cpu in millicores, memory in MiB."""

    gpu: QueueResource = Field(default_factory=QueueResource)
    cpu: QueueResource = Field(default_factory=QueueResource)
    memory: QueueResource = Field(default_factory=QueueResource)

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
    display_name: str | None = Field(default=None, alias="displayName")
    resources: QueueResources = Field(default_factory=QueueResources)


ResourceAmounts = dict[Literal["gpu", "cpu", "memory"], float]


class QueueStatus(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    allocated: dict[str, float] = Field(default_factory=dict)
    requested: dict[str, float] = Field(default_factory=dict)
    fair_share: dict[str, float] = Field(default_factory=dict, alias="fairShare")


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
