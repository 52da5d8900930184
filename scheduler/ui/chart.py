"""Inline SVG line charts (no JavaScript, no external library): allocation over time, replay curves.

A series sampled when something changed (the simulator samples once per cycle and skips idle stretches)
is a step function: `step=True` draws each value flat until the next sample, so a drop at 100 s is
drawn at 100 s, not as a slope from the sample before. Axis ticks fall on round values: 1/2/5 x 10^k
for numbers, whole seconds, minutes or hours for durations."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape


@dataclass(frozen=True)
class Series:
    label: str
    points: tuple[tuple[float, float], ...]
    color: str
    dashed: bool = False
    step: bool = False  # the value holds until the next point (sampled on change)


def nice_step(span: float, ticks: int = 6) -> float:
    """A 1/2/5 x 10^k step giving about `ticks` ticks over `span`."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def _ticks(lo: float, hi: float, step: float) -> list[float]:
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return [i * step for i in range(first, last + 1)]


def _fmt(v: float) -> str:
    return f"{round(v, 9):g}"  # ticks are multiples of a round step; drop float noise (0.30000000000000004)


# Round steps for a time axis, in seconds: 1, 2, 5, 10, 15, 30 s; 1, 2, 5, 10, 15, 30 min; 1, 2, 3, 6, 12 h; days.
TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def time_step(span_s: float, ticks: int = 6) -> float:
    """The round duration giving about `ticks` ticks over `span_s` seconds."""
    raw = span_s / ticks if span_s > 0 and math.isfinite(span_s) else 1.0
    return float(next((s for s in TIME_STEPS if s >= raw), 86400 * math.ceil(raw / 86400)))


def duration_label(seconds: float) -> str:
    """A whole duration, compactly: 45s, 2m, 1m30s, 1h, 2h30m, 1d6h."""
    s = round(seconds)
    if s == 0:
        return "0"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            parts.append(f"{s // size}{unit}")
            s %= size
    return "".join(parts[:2])


def line_chart(
    series: Sequence[Series],
    *,
    x_label: str,
    y_label: str,
    x_min: float = 0.0,
    x_max: float | None = None,
    y_min: float = 0.0,
    y_max: float | None = None,
    x_step: float | None = None,
    x_fmt: Callable[[float], str] = _fmt,
    v_markers: Sequence[tuple[float, str]] = (),
    width: int = 760,
    height: int = 320,
    title: str = "",
) -> str:
    """An SVG line chart; lines are drawn in data order (callers sort by x), clipped to the axes."""
    left, right, top, bottom = 56, 16, 16, 44
    pw, ph = width - left - right, height - top - bottom
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points]
    x_hi = x_max if x_max is not None else max(xs, default=1.0)
    y_hi = y_max if y_max is not None else max(ys, default=1.0)
    x_hi = x_hi if x_hi > x_min else x_min + 1.0
    y_hi = y_hi if y_hi > y_min else y_min + 1.0
    xstep = x_step or nice_step(x_hi - x_min)
    ystep = nice_step(y_hi - y_min, 5)

    def px(x: float) -> float:
        return left + pw * min(max((x - x_min) / (x_hi - x_min), 0.0), 1.0)

    def py(y: float) -> float:
        return top + ph * (1 - min(max((y - y_min) / (y_hi - y_min), 0.0), 1.0))

    out = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(title or y_label)}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for t in _ticks(y_min, y_hi, ystep):
        y = py(t)
        out.append(f'<line class="grid" x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    for t in _ticks(x_min, x_hi, xstep):
        x = px(t)
        out.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}"/>')
        out.append(
            f'<text class="tick" x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{escape(x_fmt(t))}</text>'
        )
    out.append(f'<rect class="frame" x="{left}" y="{top}" width="{pw}" height="{ph}"/>')
    for x, label in v_markers:
        xp = px(x)
        out.append(f'<line class="marker" x1="{xp:.1f}" x2="{xp:.1f}" y1="{top}" y2="{top + ph}"/>')
        out.append(f'<text class="marker-label" x="{xp + 4:.1f}" y="{top + 12}">{escape(label)}</text>')
    for s in series:
        shown = [(x, y) for x, y in s.points if x_min <= x <= x_hi]
        if not shown:
            continue
        if s.step:  # hold each value until the next sample, then jump; the last holds to the axis end
            held = [p for a, b in itertools.pairwise(shown) for p in (a, (b[0], a[1]))]
            shown = [*held, shown[-1], (x_hi, shown[-1][1])]
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in shown)
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        out.append(
            f'<polyline class="line" fill="none" stroke="{escape(s.color)}" stroke-width="2"{dash} '
            f'points="{pts}"><title>{escape(s.label)}</title></polyline>'
        )
    out.append(
        f'<text class="axis" x="{left + pw / 2:.0f}" y="{height - 6}" text-anchor="middle">{escape(x_label)}</text>'
    )
    out.append(
        f'<text class="axis" transform="translate(14 {top + ph / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    out.append("</svg>")
    return "".join(out)


def legend(series: Sequence[Series]) -> str:
    items = "".join(
        f'<span class="legend-item"><span class="swatch{" dashed" if s.dashed else ""}" '
        f'style="background:{escape(s.color)}"></span>{escape(s.label)}</span>'
        for s in series
    )
    return f'<div class="legend">{items}</div>'
