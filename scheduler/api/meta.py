"""Minimal Kubernetes object metadata shared by the CRD models, and how a metadata key is named in a patch."""

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


def json_pointer(key: str) -> str:
    """`key` as one JSON Pointer segment (RFC 6901: "~" -> "~0", "/" -> "~1"), e.g. an annotation key in a
    JSON patch path."""
    return key.replace("~", "~0").replace("/", "~1")
