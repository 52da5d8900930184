"""The per-node `tessera.dev/bind-lock` annotation (DESIGN.md, hand-off step 3).

The scheduler sets it on a Node when it binds a GPU pod there and the device plugin removes it once that
pod's Allocate has been served, so at most one assigned-but-unallocated pod is pending per node and the
plugin knows which pod the kubelet is allocating for.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from scheduler.api.keys import BIND_LOCK, GPU_ALLOCATED


class BindLock(BaseModel):
    """`{"pod": "<namespace>/<name>", "uid": "<pod uid>", "since": "<RFC3339>"}`."""

    model_config = ConfigDict(frozen=True)

    pod: str
    uid: str = Field(min_length=1)
    since: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @field_validator("pod")
    @classmethod
    def _namespaced(cls, value: str) -> str:
        namespace, sep, name = value.partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise ValueError(f'pod must be "<namespace>/<name>", got "{value}"')
        return value

    @field_validator("since")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        # RFC3339 always carries an offset; a naive time would compare wrongly against lock ages.
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)

    @classmethod
    def for_pod(cls, namespace: str, name: str, uid: str, since: datetime | None = None) -> BindLock:
        return cls(pod=f"{namespace}/{name}", uid=uid, since=since or datetime.now(UTC))

    @property
    def namespace(self) -> str:
        return self.pod.partition("/")[0]

    @property
    def name(self) -> str:
        return self.pod.partition("/")[2]

    def age_seconds(self, now: datetime | None = None) -> float:
        return ((now or datetime.now(UTC)) - self.since).total_seconds()

    def to_annotation(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_annotation(cls, raw: str) -> BindLock:
        """Parse the annotation; raises ValueError with a one-line reason on malformed input."""
        try:
            return cls.model_validate(json.loads(raw))
        except (json.JSONDecodeError, ValidationError, TypeError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if isinstance(exc, ValidationError) and exc.errors():
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"]) or "value"
                first = f"{where}: {err['msg']}"
            raise ValueError(f"annotation {BIND_LOCK} is malformed: {first}") from None


def allocation_confirmed(pod: Mapping[str, Any]) -> bool:
    """Whether a Pod object shows the device plugin served it: marked `tessera.dev/gpu-allocated` *and*
    admitted by the kubelet (it writes container statuses only after admission, where Allocate is called).

    The mark alone proves nothing: annotations are written by whoever may patch the pod, its own user
    included (the webhook refuses that, but the lock must hold on a cluster without it), and a preset mark
    would free the node's lock before the pod was served: the next pod bound there could then take its
    Allocate answer. Pod status is written by the kubelet (users are not given `pods/status`). The device
    plugin applies the same rule (`device_plugin/allocator.py`)."""
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    status = pod.get("status")
    started = isinstance(status, Mapping) and bool(
        status.get("containerStatuses") or status.get("initContainerStatuses")
    )
    return isinstance(annotations, Mapping) and GPU_ALLOCATED in annotations and started
