"""The `tessera.dev/gpu-allocated` annotation: what the device plugin gave a pod, once the kubelet holds it.

Written by the device plugin only (the webhook refuses it from anyone else), after the kubelet's
PodResources API showed the devices it answered `Allocate` with held by that pod. It tells the scheduler two
things: the pod is past `Allocate` (its node may take the next pod the device plugin must recognise,
DESIGN.md step 3), and, for a pod the scheduler did not place (no `tessera.dev/gpu-assignment`), which GPUs
it runs on, so it is charged to them exactly.

`{"gpus": [{"index": 0, "uuid": "GPU-..."}], "at": "<RFC3339>"}`. A bare timestamp (written by device
plugins before the GPUs were listed) reads as allocated, GPUs unknown.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scheduler.api.keys import GPU_ALLOCATED
from scheduler.api.limits import MAX_GPUS_PER_NODE


class AllocatedGPU(BaseModel):
    model_config = ConfigDict(frozen=True)

    index: int = Field(ge=0, lt=MAX_GPUS_PER_NODE)
    uuid: str = ""


class GPUAllocation(BaseModel):
    model_config = ConfigDict(frozen=True)

    gpus: list[AllocatedGPU] = Field(default_factory=list, max_length=MAX_GPUS_PER_NODE)
    at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    def to_annotation(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_annotation(cls, raw: str) -> GPUAllocation:
        """Parse the annotation; raises ValueError with a one-line reason on malformed input."""
        text = raw.strip()
        if text and not text.startswith("{"):
            try:  # the older form: a bare RFC 3339 time
                return cls(at=datetime.fromisoformat(text.replace("Z", "+00:00")))
            except ValueError:
                raise ValueError(f"annotation {GPU_ALLOCATED} is malformed: not JSON nor a time") from None
        try:
            return cls.model_validate(json.loads(text))
        except (json.JSONDecodeError, ValidationError, TypeError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if isinstance(exc, ValidationError) and exc.errors():
                err = exc.errors()[0]
                first = f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}"
            raise ValueError(f"annotation {GPU_ALLOCATED} is malformed: {first}") from None

    @property
    def indexes(self) -> list[int]:
        return [g.index for g in self.gpus]
