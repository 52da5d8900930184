"""Charts say what happened when it happened: sampled-on-change series are steps, time ticks are round,
and the replay report draws the figure its table reports (unallocated %)."""

from __future__ import annotations

import re

import pytest

from scheduler.ui.chart import Series, duration_label, line_chart, time_step
from scheduler.ui.page import timeline_section
from scheduler.ui.replay_report import render_replay_report


def points(svg: str) -> list[list[tuple[float, float]]]:
    out = []
    for pts in re.findall(r'<polyline[^>]* points="([^"]+)"', svg):
        out.append([tuple(float(v) for v in p.split(",")) for p in pts.split()])
    return out


def test_a_step_series_holds_each_value_until_the_next_sample() -> None:
    # Sampled at 0 s (80%) and 100 s (20%): the drop happens at 100 s, not along a slope from 0 s.
    svg = line_chart(
        [Series("a", ((0, 80), (100, 20)), "#000", step=True)], x_label="t", y_label="%", x_max=200, y_max=100
    )
    (line,) = points(svg)
    xs, ys = [p[0] for p in line], [p[1] for p in line]
    assert len(line) == 4  # (0,80) -> (100,80) -> (100,20) -> (200,20)
    assert ys[0] == ys[1] and xs[1] == xs[2] and ys[2] == ys[3] and ys[2] > ys[1]  # SVG y grows downwards
    plain = points(
        line_chart([Series("a", ((0, 80), (100, 20)), "#000")], x_label="t", y_label="%", x_max=200)
    )
    assert len(plain[0]) == 2  # a curve (replay) stays a curve


@pytest.mark.parametrize(
    ("span", "step"), [(10, 2), (80, 15), (500, 120), (3600, 600), (4 * 3600, 3600), (3 * 86400, 43200)]
)
def test_time_steps_are_round(span: float, step: float) -> None:
    assert time_step(span) == step


@pytest.mark.parametrize(
    ("seconds", "label"),
    [(0, "0"), (45, "45s"), (60, "1m"), (90, "1m30s"), (3600, "1h"), (5400, "1h30m"), (90000, "1d1h")],
)
def test_duration_labels(seconds: float, label: str) -> None:
    assert duration_label(seconds) == label


def test_the_timeline_has_round_ticks_and_steps() -> None:
    html = timeline_section(((0.0, 10.0), (80.0, 60.0), (400.0, 20.0)))
    ticks = re.findall(r'<text class="tick"[^>]*text-anchor="middle">([^<]+)</text>', html)
    assert ticks == ["0", "2m", "4m", "6m"]  # 400 s: a 2-minute step
    assert not any("." in t for t in ticks)


def test_the_replay_report_plots_what_its_table_reports() -> None:
    curve = [{"arrived_pct": a, "allocated_pct": min(a, 93.0)} for a in range(0, 131, 10)]
    html = render_replay_report([{"policy": "fgd", "curve": curve, "unallocated_pct_at_100": 7.0}])
    assert "GPUs unallocated (% of capacity)" in html and "GPUs allocated (% of capacity)" not in html
    assert "unallocated GPU % at arrived = 100%" in html
    full = html[html.index("<svg") : html.index("</svg>")]
    (line,) = points(full)
    # unallocated falls as pods arrive: the first point (0 arrived, 100% unallocated) is at the top
    assert line[0][1] < line[-1][1]
