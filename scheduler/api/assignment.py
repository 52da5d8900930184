"""The `tessera.dev/gpu-assignment` annotation: the scheduler's decision, read by the device plugin.

`GPUAssignment` (pydantic) is its schema: what the scheduler writes, what the device plugin, the node agent
and the tools read. The scheduler's mirror reads the assignment of every running pod it watches (150,000 at
a relist): `read_assignment` reads the annotation as the scheduler writes it with msgspec, against the same
fields and bounds, six times faster; anything else in it (another spelling, a number as text, a field it
does not know) is left to `GPUAssignment`, so both read the same text the same way
(tests/api/test_assignment_read.py).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Annotated

import msgspec
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
        """Parse the annotation; raises ValueError with a one-line reason on malformed input. The result
        is immutable and shared: the same text read again is parsed once. (The scheduler's mirror reads
        with `read_assignment`.)"""
        return _from_annotation(raw) if isinstance(raw, str) else cls._parse(raw)

    @classmethod
    def _parse(cls, raw: str) -> GPUAssignment:
        try:  # pydantic's own JSON reader: 2x faster than json.loads and a validation of the result
            return cls.model_validate_json(raw)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            first = errors[0] if errors else None
            where = ".".join(str(x) for x in first["loc"]) if first and first["loc"] else ""
            why = f"{where + ': ' if where else ''}{first['msg']}" if first else str(exc).splitlines()[0]
            raise ValueError(f"annotation {GPU_ASSIGNMENT} is malformed: {why}") from None
        except (TypeError, ValueError) as exc:  # not text at all
            raise ValueError(f"annotation {GPU_ASSIGNMENT} is malformed: {type(exc).__name__}") from None

    @property
    def whole_gpus(self) -> bool:
        return bool(self.gpus) and all(g.milli == MILLI_PER_GPU for g in self.gpus)


@functools.lru_cache(maxsize=256)
def _from_annotation(raw: str) -> GPUAssignment:
    return GPUAssignment._parse(raw)


# ---------------------------------------------------------------------------------- the mirror's read
class GPUReading(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename={"memory_mib": "memoryMiB"}):
    """`AssignedGPU`, as `read_assignment` reads it."""

    index: Annotated[int, msgspec.Meta(ge=0, lt=MAX_GPUS_PER_NODE)]
    milli: Annotated[int, msgspec.Meta(ge=1, le=MILLI_PER_GPU)]
    uuid: str = ""
    memory_mib: Annotated[int, msgspec.Meta(ge=0, le=MAX_GPU_MEMORY_MIB)] = 0


class AdmissionReading(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`Admission`, as `read_assignment` reads it."""

    queue: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    job: Annotated[str, msgspec.Meta(min_length=1, max_length=2 * 253 + 8)]
    priority: Annotated[int, msgspec.Meta(ge=-MAX_PRIORITY, le=MAX_PRIORITY)]
    preemptible: bool


class AssignmentReading(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename={"assumed_at": "assumedAt"}
):
    """`GPUAssignment`, as `read_assignment` reads it (`assumed_at` UNSET: the text has none, which
    `GPUAssignment` takes as now)."""

    node: Annotated[str, msgspec.Meta(min_length=1)]
    gpus: Annotated[tuple[GPUReading, ...], msgspec.Meta(max_length=MAX_GPUS_PER_NODE)] = ()
    assumed_at: datetime | msgspec.UnsetType = msgspec.UNSET  # (null is refused, as GPUAssignment does)
    admitted: AdmissionReading | None = None


_READ = msgspec.json.Decoder(AssignmentReading)  # strict: a number is not text, nor text a number


@functools.lru_cache(maxsize=256)
def read_assignment(raw: str) -> AssignmentReading:
    """`GPUAssignment.from_annotation` for the scheduler's mirror: the same text read the same way (raises
    ValueError with the same one-line reason), six times faster for the text the scheduler writes. The
    result is immutable and shared: the same text read again (a relist reads each pod's twice: its place
    and what it was admitted with) is read once."""
    try:
        return _READ.decode(raw)
    except (msgspec.DecodeError, TypeError):  # (a ValidationError too) anything else: as the schema reads it
        pass
    a = GPUAssignment._parse(raw)
    gpus = tuple(GPUReading(g.index, g.milli, g.uuid, g.memory_mib) for g in a.gpus)
    ad = a.admitted
    admitted = AdmissionReading(ad.queue, ad.job, ad.priority, ad.preemptible) if ad is not None else None
    return AssignmentReading(a.node, gpus, a.assumed_at, admitted)
