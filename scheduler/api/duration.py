"""Durations as Kubernetes writes them (Go's `time.Duration` text, KAI's `metav1.Duration` fields).

`parse_go_duration` reads "30s", "1h30m", "1.5m", "250ms", "-1s", "0". `MinRuntime` is the type of a
Queue's `preemptMinRuntime` / `reclaimMinRuntime`: such a duration, not negative, at most
`MAX_MIN_RUNTIME_S`; kept as the user's text (a Queue survives a round trip unchanged), read as seconds
with `seconds`.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, WithJsonSchema

from scheduler.api.limits import MAX_MIN_RUNTIME_S, MAX_NUMBER_CHARS

_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
# The same grammar for the CRD (non-negative only): the API server refuses anything else at admission.
GO_DURATION_PATTERN = r"^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|ms|s|m|h))+)$"


def parse_go_duration(text: str) -> float:
    """Seconds of a Go duration as Kubernetes' metav1.Duration writes it ("30s", "1h30m", "-1s", "0")."""
    raw = text.strip()
    if len(raw) > MAX_NUMBER_CHARS:
        raise ValueError(f"{text[:MAX_NUMBER_CHARS]!r}... is too long for a duration")
    sign = -1.0 if raw.startswith("-") else 1.0
    body = raw.lstrip("+-")
    if body == "0":
        return 0.0
    parts = _GO_DURATION.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        raise ValueError(f"{text!r} is not a duration like 30s, 5m or 1h30m")
    return sign * sum(float(n) * _GO_UNITS[u] for n, u in parts)


def _min_runtime(text: str) -> str:
    seconds = parse_go_duration(text)
    if seconds < 0:
        raise ValueError(f"a minimum runtime cannot be negative ({text!r}); 0 means no protection")
    if seconds > MAX_MIN_RUNTIME_S:
        raise ValueError(f"minimum runtime {text!r} is more than the largest accepted (1 year)")
    return text.strip()


MinRuntime = Annotated[
    str,
    AfterValidator(_min_runtime),
    WithJsonSchema({"type": "string", "pattern": GO_DURATION_PATTERN, "maxLength": MAX_NUMBER_CHARS}),
]


def seconds(value: str | None) -> float | None:
    """A validated `MinRuntime` in seconds (None stays None: unset, inherited)."""
    return None if value is None else parse_go_duration(value)


def show_duration(seconds: float, *, up: bool = True) -> str:
    """Seconds as people read them: "4m10s", "1h", "45s"; whole seconds, rounded up (a wait is never
    shown shorter than it is) or, with `up=False`, down (an age)."""
    total = int(-(-seconds // 1)) if up else int(seconds // 1)
    if total <= 0:
        return "0s"
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (s, "s")) if v) or "0s"
