"""What `tessera doctor` reports: one finding per thing checked, with the fix when it is wrong."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

Status = Literal["ok", "warn", "fail"]
STALE_REPORT_S = 300.0
MAX_LINES = 5  # per check; the rest are counted


@dataclass(frozen=True)
class Finding:
    check: str
    status: Status
    message: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        out = {"check": self.check, "status": self.status, "message": self.message}
        return out | ({"fix": self.fix} if self.fix else {})


@dataclass(frozen=True)
class DoctorOptions:
    namespace: str = "tessera-system"  # where the chart was installed
    lease_name: str = "tessera-scheduler"
    probe_namespace: str = "default"  # where the webhook probe's dry-run pod is "created"
    now: Callable[[], float] = time.time
    # What pods name in spec.schedulerName (the probe's and the queue check's): None = the name the
    # webhook configurations match on (`kai-scheduler` with the chart's kaiCompat), else `tessera`.
    scheduler_name: str | None = None


def timestamp(raw: Any) -> float | None:
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def capped(check: str, status: Status, lines: list[str], fix: str) -> list[Finding]:
    out = [Finding(check, status, line, fix) for line in lines[:MAX_LINES]]
    if len(lines) > MAX_LINES:
        out.append(Finding(check, status, f"... and {len(lines) - MAX_LINES} more like these", fix))
    return out
