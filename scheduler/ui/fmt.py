"""Number and text formatting shared by the panels (HTML-escaped where it returns markup)."""

from __future__ import annotations

import json
from html import escape
from typing import Any

MILLI_PER_GPU = 1000


def gpus(milli: int | float, digits: int = 3) -> str:
    """Milli as GPUs, without noise: 2500 -> "2.5", 333 -> "0.333" (or "0.33" with digits=2)."""
    return f"{milli / MILLI_PER_GPU:.{digits}f}".rstrip("0").rstrip(".") or "0"


def mib(value: int | float) -> str:
    return f"{value / 1024:.1f} GiB" if value >= 1024 else f"{value:.0f} MiB"


def amount(value: float, resource: str) -> str:
    """A queue figure in its resource's unit; -1 (unlimited / no limit) as the infinity sign."""
    if value < 0:
        return "∞"
    if resource == "cpu":
        return f"{value / 1000:.3g}" if value < 100_000 else f"{value / 1000:,.0f}"
    if resource == "memory":
        return f"{value / 1024:,.1f}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")


UNITS = {"gpu": "GPUs", "cpu": "cores", "memory": "GiB"}


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def attr(value: object) -> str:
    return escape(str(value), quote=True)


def script_json(data: Any) -> str:
    """JSON safe inside <script type="application/json">: no '<' can close the element early."""
    return json.dumps(data, separators=(",", ":")).replace("<", "\\u003c").replace(">", "\\u003e")
