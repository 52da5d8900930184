"""Queues: the tree, and per queue quota, fair share, allocated, requested and limit as bars."""

from __future__ import annotations

from html import escape

from scheduler.model.resources import RESOURCE_NAMES
from scheduler.ui.fmt import UNITS, amount, attr
from scheduler.ui.usage_spark import sparkline
from scheduler.ui.view import QueueFigures, QueueView


def scale(queues: tuple[QueueView, ...] | list[QueueView], resource: str) -> float:
    """Full bar width: the largest finite quota/limit/fair share/allocation; requests may overflow it by
    half again before they are clipped (a huge backlog must not squash every other bar)."""
    figs = [q.resources[resource] for q in queues]
    base = max(
        [f.allocated for f in figs]
        + [f.fair_share for f in figs]
        + [f.quota for f in figs if f.quota >= 0]
        + [f.limit for f in figs if f.limit >= 0]
        + [0.0]
    )
    req = max([f.requested for f in figs] + [0.0])
    top = max(base, min(req, 1.5 * base) if base > 0 else req)
    return top if top > 0 else 1.0


def _pct(v: float, top: float) -> float:
    return max(0.0, min(100.0, 100.0 * v / top))


def bar(f: QueueFigures, top: float, color: str, resource: str) -> str:
    unit = UNITS[resource]
    tip = (
        f"allocated {amount(f.allocated, resource)} · fair share {amount(f.fair_share, resource)} · "
        f"quota {amount(f.quota, resource)} · requested {amount(f.requested, resource)} · "
        f"limit {amount(f.limit, resource)} ({unit})"
    )
    parts = [
        f'<span class="req" style="width:{_pct(f.requested, top):.2f}%;--qc:{attr(color)}"></span>',
        f'<span class="alloc" style="width:{_pct(f.allocated, top):.2f}%;background:{attr(color)}"></span>',
    ]
    if f.requested > top:
        parts.append('<span class="overflow" title="requested exceeds the scale">»</span>')
    for cls, v in (("quota", f.quota), ("fair", f.fair_share), ("limit", f.limit)):
        if v >= 0 and not (cls == "fair" and v == 0):
            parts.append(f'<span class="mark {cls}" style="left:{_pct(v, top):.2f}%"></span>')
    return f'<div class="qbar" title="{attr(tip)}">{"".join(parts)}</div>'


def _name(q: QueueView) -> str:
    indent = "".join('<span class="tree-pad"></span>' for _ in range(q.depth))
    glyph = "└ " if q.depth else ""
    kind = "" if q.is_leaf else ' <span class="muted">(parent)</span>'
    runtime = f' <span class="muted minrt">{escape(q.min_runtime)}</span>' if q.min_runtime else ""
    return f'{indent}<span class="tree-glyph">{glyph}</span>{escape(q.name)}{kind}{runtime}'


def _recent(q: QueueView, resource: str, color: str) -> str:
    """Time-based fair share's column: the queue's recent usage, and (GPUs) its use over the window."""
    used = q.recent_usage.get(resource)
    text = f"{used:.0%}" if used is not None else "-"
    spark = sparkline(q.usage_series, color) if resource == "gpu" else ""
    return f'<td class="num recent">{spark} {text}</td>'


def _table(queues: tuple[QueueView, ...], resource: str, colors: dict[str, str]) -> str:
    top = scale(queues, resource)
    timed = any(q.recent_usage for q in queues)  # time-based fair share is on
    rows = []
    for q in queues:
        f = q.resources[resource]
        color = colors.get(q.name, "#999")
        cells = "".join(
            f'<td class="num">{amount(v, resource)}</td>'
            for v in (f.allocated, f.fair_share, f.quota, f.requested, f.limit)
        )
        rows.append(
            f'<tr data-queue="{attr(q.name)}"><td class="qname"><span class="swatch" '
            f'style="background:{attr(color)}"></span>{_name(q)}</td><td class="num">{q.priority}</td>'
            f'<td class="barcell">{bar(f, top, color, resource)}</td>{cells}'
            f'<td class="num">{f.over_quota_weight:g}</td>{_recent(q, resource, color) if timed else ""}</tr>'
        )
    hidden = "" if resource == "gpu" else " hidden"
    return (
        f'<table class="queues" data-res="{resource}"{hidden}><thead><tr><th>queue</th><th>priority</th>'
        f"<th>0 … {amount(top, resource)} {UNITS[resource]}</th><th>allocated</th><th>fair share</th>"
        f"<th>quota</th><th>requested</th><th>limit</th><th>weight</th>"
        f"{'<th>recent use</th>' if timed else ''}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def render_queues(queues: tuple[QueueView, ...], colors: dict[str, str], usage_note: str = "") -> str:
    tabs = "".join(
        f'<label><input type="radio" name="q-res" value="{r}"{" checked" if r == "gpu" else ""}> '
        f"{r} ({UNITS[r]})</label>"
        for r in RESOURCE_NAMES
    )
    key = (
        '<div class="legend"><span class="legend-item"><span class="swatch" style="background:#777"></span>'
        'allocated</span><span class="legend-item"><span class="swatch req-key"></span>requested (allocated '
        '+ pending)</span><span class="legend-item"><span class="mark-key fair"></span>fair share</span>'
        '<span class="legend-item"><span class="mark-key quota"></span>quota</span><span class="legend-item">'
        '<span class="mark-key limit"></span>limit</span><span class="legend-item">∞ = unlimited / none'
        "</span></div>"
    )
    tables = "".join(_table(queues, r, colors) for r in RESOURCE_NAMES)
    note = f'<p class="note">{escape(usage_note)}</p>' if usage_note else ""
    return (
        f'<section id="queues"><h2>Queues</h2><div class="filters">{tabs}</div>{key}{note}{tables}</section>'
    )
