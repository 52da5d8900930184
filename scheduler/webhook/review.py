"""The AdmissionReview v1 schema (the parts Tessera reads and writes)."""

from __future__ import annotations

import base64
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class GroupVersionKind(BaseModel):
    group: str = ""
    version: str = ""
    kind: str = ""


class GroupVersionResource(BaseModel):
    group: str = ""
    version: str = ""
    resource: str = ""


class UserInfo(BaseModel):
    model_config = ConfigDict(extra="allow")

    username: str = ""
    uid: str = ""
    groups: list[str] = Field(default_factory=list)


class AdmissionRequest(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="allow")

    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    sub_resource: str | None = Field(default=None, alias="subResource")
    name: str | None = None
    namespace: str | None = None
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    user_info: UserInfo = Field(default_factory=UserInfo, alias="userInfo")
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = Field(default=None, alias="oldObject")
    dry_run: bool = Field(default=False, alias="dryRun")


class AdmissionReview(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="allow")

    api_version: Literal["admission.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


def response(
    uid: str,
    *,
    allowed: bool,
    message: str = "",
    code: int = 403,
    patch: list[dict[str, Any]] | None = None,
    warnings: list[str] | None = None,
) -> dict[str, Any]:
    """An AdmissionReview v1 answer."""
    body: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        body["status"] = {
            "code": code,
            "message": message,
            "reason": "Forbidden" if code == 403 else "BadRequest",
        }
    if patch:
        body["patchType"] = "JSONPatch"
        body["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if warnings:
        body["warnings"] = warnings
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": body}
