"""The per-node bind lock (node annotation `tessera.dev/bind-lock`), shared by scheduler and device plugin.

The scheduler takes it before binding a GPU pod to the node and the device plugin frees it once it served
that pod's Allocate, so at most one assigned-but-unallocated GPU pod is pending per node and the plugin
knows which pod an Allocate call is for. A lock older than the scheduler's timeout is stale and may be
taken over (the pod never reached the kubelet, or the plugin died).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scheduler.api.keys import BIND_LOCK


class BindLock(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)

    pod_uid: str = Field(min_length=1, alias="podUID")
    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    since: datetime = Field(default_factory=lambda: datetime.now(UTC))

    def to_annotation(self) -> str:
        return self.model_dump_json(by_alias=True)

    @classmethod
    def from_annotation(cls, raw: str) -> BindLock:
        """Parse the annotation; raises ValueError with a one-line reason on malformed input."""
        try:
            return cls.model_validate(json.loads(raw))
        except (json.JSONDecodeError, ValidationError, TypeError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"annotation {BIND_LOCK} is malformed: {first}") from None

    def age_seconds(self, now: datetime | None = None) -> float:
        since = self.since if self.since.tzinfo else self.since.replace(tzinfo=UTC)
        return ((now or datetime.now(UTC)) - since).total_seconds()
