"""Durations such as "30s", "10m", "1h30m", "1.5h" or plain seconds."""

from __future__ import annotations

import math
import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(raw: str | float | int) -> float:
    """Seconds; raises ValueError with the offending text on anything else."""
    if isinstance(raw, int | float):
        value = float(raw)
    else:
        text = raw.strip().lower().replace(" ", "")
        if not text:
            raise ValueError("empty duration")
        try:
            value = float(text)
        except ValueError:
            pos, value = 0, 0.0
            for m in _PART.finditer(text):
                if m.start() != pos:
                    break
                value += float(m.group(1)) * _UNIT[m.group(2)]
                pos = m.end()
            if pos != len(text):
                raise ValueError(f"{raw!r} is not a duration (use e.g. 30s, 10m, 1h30m)") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{raw!r} must be a finite, non-negative duration")
    return value
