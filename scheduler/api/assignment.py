"""The `tessera.dev/gpu-assignment` annotation: the scheduler's decision, read by the device plugin."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scheduler.api.keys import GPU_ASSIGNMENT, MILLI_PER_GPU
from scheduler.api.limits import MAX_GPU_MEMORY_MIB, MAX_GPUS_PER_NODE, MAX_PRIORITY


class AssignedGPU(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)

    index: int = Field(ge=0, lt=MAX_GPUS_PER_NODE)
    uuid: str = ""
    milli: int = Field(ge=1, le=MILLI_PER_GPU)
    memory_mib: int = Field(default=0, ge=0, le=MAX_GPU_MEMORY_MIB, alias="memoryMiB")


class Admission(BaseModel):
    """What the pod's job was admitted with when the scheduler bound it: what it is charged to and how it may
    be preempted, fixed while it runs whatever its labels or its PodGroup say later (so a restarted
    scheduler charges it as the one that bound it did)."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    queue: str = Field(min_length=1, max_length=253)
    job: str = Field(min_length=1, max_length=2 * 253 + 8)  # namespace/name, or pod:namespace/name
    priority: int = Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY)
    preemptible: bool


class GPUAssignment(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)

    node: str = Field(min_length=1)
    gpus: list[AssignedGPU] = Field(default_factory=list, max_length=MAX_GPUS_PER_NODE)
    assumed_at: datetime = Field(default_factory=lambda: datetime.now(UTC), alias="assumedAt")
    admitted: Admission | None = None  # None: written by a scheduler that did not record it

    def to_annotation(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)

    @classmethod
    def from_annotation(cls, raw: str) -> GPUAssignment:
        """Parse the annotation; raises ValueError with a one-line reason on malformed input."""
        try:
            return cls.model_validate(json.loads(raw))
        except (json.JSONDecodeError, ValidationError, TypeError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"annotation {GPU_ASSIGNMENT} is malformed: {first}") from None

    @property
    def whole_gpus(self) -> bool:
        return bool(self.gpus) and all(g.milli == MILLI_PER_GPU for g in self.gpus)
