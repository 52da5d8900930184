"""Minimal Kubernetes object metadata shared by the CRD models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ObjectMeta(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="allow")

    name: str = Field(min_length=1)
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str | None = None
    resource_version: str | None = Field(default=None, alias="resourceVersion")


class Condition(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    type: str
    status: str = "True"
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = Field(default=None, alias="lastTransitionTime")
