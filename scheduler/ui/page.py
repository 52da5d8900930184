"""Whole pages: one self-contained HTML document (inline CSS and JS, no external fetch of any kind)."""

from __future__ import annotations

from functools import cache
from html import escape
from importlib import resources
from string import Template

from scheduler.ui.chart import Series, duration_label, line_chart, time_step
from scheduler.ui.fmt import gpus
from scheduler.ui.gpu_map import render_gpu_map
from scheduler.ui.pending_panel import render_pending
from scheduler.ui.queues_panel import render_queues
from scheduler.ui.view import DashboardView


@cache
def asset(name: str) -> str:
    return resources.files("scheduler.ui").joinpath(name).read_text(encoding="utf-8")


def page(*, title: str, subtitle: str, nav: list[tuple[str, str]], body: str, generated: str) -> str:
    links = "".join(f'<a href="#{escape(anchor)}">{escape(label)}</a>' for anchor, label in nav)
    return Template(asset("page.html")).substitute(
        title=escape(title),
        subtitle=escape(subtitle),
        nav=links,
        body=body,
        generated=escape(generated),
        style=asset("dashboard.css"),
        script=asset("dashboard.js"),
    )


def _card(value: str, key: str, meter: float | None = None, warn: bool = False) -> str:
    bar = (
        f'<div class="meter"><span style="width:{max(0.0, min(100.0, meter)):.1f}%"></span></div>'
        if meter is not None
        else ""
    )
    return f'<div class="card{" warn" if warn else ""}"><div class="v">{value}</div><div class="k">{escape(key)}</div>{bar}</div>'


def summary_cards(view: DashboardView) -> str:
    t = view.totals
    return (
        '<section id="summary" class="cards">'
        + "".join(
            [
                _card(
                    f"{gpus(t.allocated_milli, 1)} / {t.gpus}",
                    f"GPUs allocated ({t.allocated_pct:.1f}%)",
                    t.allocated_pct,
                ),
                _card(str(t.nodes), "nodes"),
                _card(gpus(t.stranded_milli, 2), "GPUs idle in fragments (partly used GPUs)"),
                _card(str(t.unhealthy_gpus), "unhealthy GPUs", warn=t.unhealthy_gpus > 0),
                _card(str(t.running_pods), "pods holding resources"),
                _card(str(t.pending_pods), "pods pending", warn=t.pending_pods > 0),
            ]
        )
        + "</section>"
    )


def timeline_section(points: tuple[tuple[float, float], ...]) -> str:
    if not points:
        return ""
    end = max(x for x, _ in points) or 1.0
    series = [Series("GPU allocated %", points, "#0072b2", step=True)]
    svg = line_chart(
        series, x_label="simulated time", y_label="GPUs allocated (%)", x_max=end, y_max=100,
        x_step=time_step(end), x_fmt=duration_label, title="GPU allocation over time",
    )  # fmt: skip
    peak = max(p for _, p in points)
    return (
        f'<section id="timeline"><h2>Allocation over time</h2><p class="muted">Share of all GPU capacity '
        f"assigned to pods after each scheduling cycle (peak {peak:.1f}%, last {points[-1][1]:.1f}%).</p>"
        f"{svg}</section>"
    )


def warnings_section(warnings: tuple[str, ...]) -> str:
    if not warnings:
        return ""
    items = "".join(f"<li>{escape(w)}</li>" for w in warnings[:50])
    return (
        f'<section id="warnings"><details><summary>{len(warnings)} warning{"s" if len(warnings) != 1 else ""} '
        f'about objects the scheduler could not use</summary><ul class="warnings">{items}</ul></details></section>'
    )


def dashboard_body(view: DashboardView, *, aggregate: bool | None = None) -> str:
    return "".join(
        [
            summary_cards(view),
            timeline_section(view.timeline),
            render_gpu_map(view, aggregate=aggregate),
            render_queues(view.queues, view.queue_colors, view.usage_note),
            render_pending(view.pending),
            warnings_section(view.warnings),
        ]
    )


def dashboard_nav(view: DashboardView) -> list[tuple[str, str]]:
    nav = [("map", "GPU map"), ("queues", "Queues"), ("pending", f"Pending ({view.totals.pending_pods})")]
    return ([("timeline", "Allocation over time")] if view.timeline else []) + nav


def render_dashboard(view: DashboardView, *, aggregate: bool | None = None) -> str:
    """The dashboard as one self-contained HTML page (served at /ui, or written as a report)."""
    return page(
        title=view.title,
        subtitle=f"{view.source} · {view.totals.nodes} nodes · {view.totals.gpus} GPUs",
        nav=dashboard_nav(view),
        body=dashboard_body(view, aggregate=aggregate),
        generated=view.generated_at,
    )
