"""API errors rendered as `Status` objects, the way the real server reports them."""

from __future__ import annotations

from typing import Any

_REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


class ApiError(Exception):
    def __init__(
        self, code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def not_found(kind_plural: str, name: str, group: str = "") -> ApiError:
    what = f"{kind_plural}.{group}" if group else kind_plural
    return ApiError(
        404, f'{what} "{name}" not found', details={"name": name, "group": group, "kind": kind_plural}
    )


def conflict(kind_plural: str, name: str, why: str, group: str = "") -> ApiError:
    what = f"{kind_plural}.{group}" if group else kind_plural
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {what} "{name}": {why}',
        details={"name": name, "group": group, "kind": kind_plural},
    )


def success_status(code: int = 201) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}
