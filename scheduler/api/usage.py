"""The queues' usage history as it is kept between scheduler runs (time-based fair share,
docs/fairshare.md): one JSON document in a ConfigMap, written by the leading scheduler.

Time is cut into buckets; each holds, for its span, the integral of what every queue held (GPU-seconds,
CPU millicore-seconds, MiB-seconds) and of the cluster's capacity. Only queues and resources with some
use are written. A bucket states its own start and length, so a history written at one resolution is
read at any other.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

HISTORY_KEY = "history.json"  # the ConfigMap's data key
# Bounds (scheduler/api/limits.py's spirit): 2**40 millicores held for 30 years is about 1e21.
MAX_AMOUNT = 1e22
MAX_SECONDS = 100 * 365 * 24 * 3600.0
HISTORY_VERSION: Literal[1] = 1


class Amounts(BaseModel):
    """Resource-seconds: gpu in GPU-seconds, cpu in millicore-seconds, memory in MiB-seconds."""

    model_config = ConfigDict(extra="forbid")

    gpu: float = Field(default=0.0, ge=0, le=MAX_AMOUNT, allow_inf_nan=False)
    cpu: float = Field(default=0.0, ge=0, le=MAX_AMOUNT, allow_inf_nan=False)
    memory: float = Field(default=0.0, ge=0, le=MAX_AMOUNT, allow_inf_nan=False)


class UsageBucket(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    start: float = Field(ge=-MAX_SECONDS, le=10 * MAX_SECONDS, allow_inf_nan=False)  # Unix time
    seconds: float = Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    capacity: Amounts = Field(default_factory=Amounts)
    queues: dict[str, Amounts] = Field(default_factory=dict)


class UsageHistoryRecord(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    version: Literal[1] = HISTORY_VERSION
    saved_at: float = Field(alias="savedAt", ge=-MAX_SECONDS, le=10 * MAX_SECONDS, allow_inf_nan=False)
    buckets: list[UsageBucket] = Field(default_factory=list)

    @model_validator(mode="after")
    def _ordered(self) -> UsageHistoryRecord:
        starts = [b.start for b in self.buckets]
        if starts != sorted(starts):
            raise ValueError("buckets must be in time order")
        return self
