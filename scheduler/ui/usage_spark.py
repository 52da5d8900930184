"""Time-based fair share on the queue panel: each queue's recent usage, and its GPU use over the window
as a sparkline (one bar per bucket of the usage history, share of the cluster's GPUs)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.cycle import Scheduler
from scheduler.model.resources import RESOURCE_NAMES
from scheduler.ui.chart import duration_label
from scheduler.ui.fmt import attr
from scheduler.ui.view import QueueView

WIDTH, HEIGHT = 96, 16
MAX_BARS = 48  # more buckets than this are averaged in groups (a bar stays at least 2 px wide)


def with_usage(queues: list[QueueView], scheduler: Scheduler) -> list[QueueView]:
    """The queues with what time-based fair share divided by in the latest cycle (unchanged when off)."""
    fs = scheduler.fairshare
    if fs is None:
        return queues
    last = dict(fs.last)
    out = []
    for q in queues:
        used = last.get(q.name)
        series = tuple(share for _, share in fs.history.series(q.name))
        recent = {r: used.get(r) for r in RESOURCE_NAMES} if used is not None else {}
        out.append(replace(q, recent_usage=recent, usage_series=series))
    return out


def usage_note(scheduler: Scheduler) -> str:
    fs = scheduler.fairshare
    if fs is None:
        return ""
    p = fs.params
    decay = f", half-life {duration_label(p.half_life_s)}" if p.half_life_s else ", no decay"
    return (
        f"recent use: the share of the cluster a queue held over the last {duration_label(p.window_s)}"
        f"{decay}; it lowers (or raises) the queue's share of what is left over quota (kValue {p.k_value:g})"
    )


def sparkline(series: tuple[float, ...], color: str) -> str:
    """An inline SVG: one bar per bucket, the bucket's share of the cluster (0..1) as its height."""
    if not series:
        return ""
    latest = series[-1]
    if len(series) > MAX_BARS:
        size = -(-len(series) // MAX_BARS)
        series = tuple(
            sum(series[i : i + size]) / len(series[i : i + size]) for i in range(0, len(series), size)
        )
    w = WIDTH / len(series)
    bars = "".join(
        f'<rect x="{i * w:.2f}" y="{HEIGHT * (1 - min(max(v, 0.0), 1.0)):.2f}" width="{max(w - 0.3, 0.3):.2f}" '
        f'height="{HEIGHT * min(max(v, 0.0), 1.0):.2f}"/>'
        for i, v in enumerate(series)
    )
    tip = f"share of the cluster's GPUs held over the window, oldest first; now {latest:.0%}"
    return (
        f'<svg class="spark" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'fill="{attr(color)}" role="img" aria-label="{attr(tip)}"><title>{attr(tip)}</title>{bars}</svg>'
    )
