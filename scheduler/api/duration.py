"""Durations: Go's `time.Duration` text as Kubernetes writes it (KAI's `metav1.Duration` fields), and the
friendlier form people write in annotations and flags.

`parse_go_duration` reads "30s", "1h30m", "1.5m", "250ms", "-1s", "0". `parse_duration` reads what users
write in `tessera.dev/sim-duration`, `--until` or a podgrouper rule: the same units plus days ("2d"), plain
seconds ("90"), any case and spaces ("1h 30m"); never negative. `MinRuntime` is the type of a Queue's
`preemptMinRuntime` / `reclaimMinRuntime`: a Go duration, not negative, at most `MAX_MIN_RUNTIME_S`; kept as
the user's text (a Queue survives a round trip unchanged), read as seconds with `seconds`.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import AfterValidator, WithJsonSchema

from scheduler.api.limits import MAX_MIN_RUNTIME_S, MAX_NUMBER_CHARS

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h|d)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_UNITS_WITH_DAYS = {**_UNITS, "d": 86400.0}
# The same grammar for the CRD (non-negative only): the API server refuses anything else at admission.
GO_DURATION_PATTERN = r"^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|ms|s|m|h))+)$"


def _sum_of_parts(body: str, units: dict[str, float]) -> float | None:
    """Seconds of `body` written as number-unit parts only ("1h30m"), or None when it is not that."""
    parts = _PART.findall(body)
    if not body or "".join(n + u for n, u in parts) != body or any(u not in units for _, u in parts):
        return None
    return sum(float(n) * units[u] for n, u in parts)


def parse_go_duration(text: str) -> float:
    """Seconds of a Go duration as Kubernetes' metav1.Duration writes it ("30s", "1h30m", "-1s", "0")."""
    raw = text.strip()
    if len(raw) > MAX_NUMBER_CHARS:
        raise ValueError(f"{text[:MAX_NUMBER_CHARS]!r}... is too long for a duration")
    sign = -1.0 if raw.startswith("-") else 1.0
    body = raw.lstrip("+-")
    if body == "0":
        return 0.0
    value = _sum_of_parts(body, _UNITS)
    if value is None:
        raise ValueError(f"{text!r} is not a duration like 30s, 5m or 1h30m")
    return sign * value


def parse_duration(raw: str | float | int) -> float:
    """Seconds of a duration as people write it ("30s", "10m", "1h30m", "1.5h", "2d", "90"); raises
    ValueError with the offending text on anything else, negative or not finite."""
    if isinstance(raw, int | float):
        value = float(raw)
    else:
        text = raw.strip().lower().replace(" ", "")
        if not text:
            raise ValueError("empty duration")
        if len(text) > MAX_NUMBER_CHARS:
            raise ValueError(f"{raw[:MAX_NUMBER_CHARS]!r}... is too long for a duration")
        try:
            value = float(text)
        except ValueError:
            parts = _sum_of_parts(text, _UNITS_WITH_DAYS)
            if parts is None:
                raise ValueError(f"{raw!r} is not a duration (use e.g. 30s, 10m, 1h30m)") from None
            value = parts
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{raw!r} must be a finite, non-negative duration")
    return value


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
