"""The `PodGroup` CRD (namespaced): a gang of pods scheduled all-or-nothing."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from scheduler.api.keys import API_VERSION, DEFAULT_QUEUE
from scheduler.api.limits import MAX_MIN_MEMBER, MAX_STALE_GRACE_S
from scheduler.api.meta import Condition, ObjectMeta
from scheduler.api.topology import TopologyConstraint

PodGroupPhase = Literal["Pending", "Running", "Unschedulable", "Finished"]


class PodGroupSpec(BaseModel):
    model_config = ConfigDict(populate_by_name=True, allow_inf_nan=False)

    # strict: a number, as the API server requires (no "1_000", no true)
    min_member: int = Field(default=1, ge=1, le=MAX_MIN_MEMBER, strict=True, alias="minMember")
    queue: str = DEFAULT_QUEUE
    priority_class_name: str | None = Field(default=None, alias="priorityClassName")
    preemptibility: Literal["preemptible", "non-preemptible"] | None = None
    # Seconds a running gang may stay below minMember before it is evicted whole.
    stale_grace_seconds: float = Field(default=60, ge=0, le=MAX_STALE_GRACE_S, alias="staleGraceSeconds")
    # Where the gang's pods must or should sit together (KAI's field; see scheduler/api/topology.py).
    topology_constraint: TopologyConstraint | None = Field(default=None, alias="topologyConstraint")


class PodGroupStatus(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    phase: PodGroupPhase = "Pending"
    running: int = 0
    conditions: list[Condition] = Field(default_factory=list)


class PodGroup(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    api_version: Literal["scheduling.tessera.dev/v1alpha1"] = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["PodGroup"] = "PodGroup"
    metadata: ObjectMeta
    spec: PodGroupSpec = Field(default_factory=PodGroupSpec)
    status: PodGroupStatus | None = None
