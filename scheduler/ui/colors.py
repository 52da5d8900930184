"""Queue colours: stable for a given set of queue names, distinct for the first dozen, never grey.

Grey is kept for free capacity and black/red for markers, so a queue colour is never mistaken for them.
"""

from __future__ import annotations

from collections.abc import Iterable

# A qualitative palette that stays distinguishable for common colour-vision deficiencies (Okabe-Ito
# first, then Tableau-like extensions).
PALETTE = (
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00",
    "#7b68ee", "#8c564b", "#bcbd22", "#17becf", "#2e8b57", "#b8860b",
)  # fmt: skip
OTHER_QUEUE = "(other scheduler)"
OTHER_COLOR = "#555555"


def _hsl(i: int) -> str:
    hue = (i * 137.508) % 360  # golden angle: successive hues stay far apart
    return f"hsl({hue:.0f},60%,45%)"


def queue_colors(names: Iterable[str]) -> dict[str, str]:
    """A colour for every queue name, in the given order (callers pass tree order so it reads well)."""
    out: dict[str, str] = {}
    for name in names:
        if name in out:
            continue
        i = len(out)
        out[name] = PALETTE[i] if i < len(PALETTE) else _hsl(i)
    out[OTHER_QUEUE] = OTHER_COLOR
    return out
