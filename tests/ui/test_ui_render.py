"""The HTML pages: self-contained, escaped, the GPU map drawn to scale, readable at 1,000+ nodes."""

from __future__ import annotations

import dataclasses
import re
import time
from html.parser import HTMLParser
from typing import ClassVar

import pytest

from scheduler.ui import build_view, render_dashboard
from scheduler.ui.chart import Series, line_chart, nice_step
from scheduler.ui.view import DashboardView
from tests.ui.scenario import big_cluster, report_for, small_cluster


class Tags(HTMLParser):
    """Collects start tags with their attributes, and checks they are balanced."""

    VOID: ClassVar[frozenset[str]] = frozenset(
        {"meta", "link", "input", "br", "img", "hr"}
    )  # HTML void elements; SVG ones self-close

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1:]}>"
        self.stack.pop()


def parse(html: str) -> Tags:
    p = Tags()
    p.feed(html)
    p.close()
    assert p.stack == [], f"unclosed: {p.stack}"
    return p


@pytest.fixture(scope="module")
def view() -> DashboardView:
    _, sched = small_cluster()
    return build_view(
        sched, [report_for("a100-0", 4, used_mib=18000, unhealthy=3)], timeline=[(0, 0.0), (1, 27.5)]
    )


def test_page_is_self_contained_and_well_formed(view: DashboardView) -> None:
    html = render_dashboard(view)
    tags = parse(html)
    for tag, attrs in tags.tags:
        assert "src" not in attrs, f"<{tag}> loads {attrs['src']}"
        if tag == "link":
            assert (attrs.get("href") or "").startswith("data:"), attrs
    # Only the SVG namespace may spell a URL; nothing is fetched from anywhere.
    assert set(re.findall(r"https?://[^\"'\s)]+", html)) <= {"http://www.w3.org/2000/svg"}
    assert "<script>" in html and "<style>" in html


def test_slices_are_drawn_to_scale_and_coloured_by_queue(view: DashboardView) -> None:
    tags = parse(render_dashboard(view)).tags
    slices = {a["data-pod"]: a for t, a in tags if t == "span" and "slice" in (a.get("class") or "")}
    assert "width:50%" in (slices["team-a/half"]["style"] or "")
    assert "width:25%" in (slices["team-b/quarter"]["style"] or "")
    assert "width:100%" in (slices["team-a/whole2"]["style"] or "")
    assert view.queue_colors["team-a"] in (slices["team-a/half"]["style"] or "")
    assert view.queue_colors["team-a"] != view.queue_colors["team-b"]
    bad = [a for t, a in tags if t == "div" and "unhealthy" in (a.get("class") or "")]
    assert len(bad) == 1 and bad[0]["data-i"] == "3"
    meas = [a for t, a in tags if t == "span" and a.get("class") == "meas"]
    assert len(meas) == 4  # one strip per reported GPU of a100-0
    assert any("width:43.9%" in (a["style"] or "") for a in meas)  # 18000 of 40960 MiB


def test_sections_present(view: DashboardView) -> None:
    html = render_dashboard(view)
    for anchor in ("summary", "timeline", "map", "queues", "pending"):
        assert f'id="{anchor}"' in html
    assert html.count('<table class="queues"') == 3  # gpu, cpu, memory
    assert 'data-reason="GangUnschedulable"' in html and "gang team-b/ddp" in html


def test_text_is_escaped(view: DashboardView) -> None:
    hostile = dataclasses.replace(view, warnings=('<img src=x onerror="alert(1)">',), title="a<b")
    html = render_dashboard(hostile)
    assert "<img src=x" not in html and "&lt;img src=x" in html
    assert "<title>a&lt;b</title>" in html


def test_chart_points_land_where_the_data_says() -> None:
    svg = line_chart([Series("s", ((0, 0), (50, 100)), "#000")], x_label="x", y_label="y", x_max=100, y_max=100,
                     width=156, height=160)  # fmt: skip
    # plot area: x from 56 to 140 (84 px), y from 16 to 116 (100 px)
    assert 'points="56.0,116.0 98.0,16.0"' in svg
    assert nice_step(100) == 20 and nice_step(7) == 2 and nice_step(0) == 1


def test_1200_nodes_fold_into_few_rows_and_render_fast() -> None:
    sched = big_cluster(1200)
    t0 = time.perf_counter()
    view = build_view(sched)
    html = render_dashboard(view)
    elapsed = time.perf_counter() - t0
    rows = html.count('<div class="node"')
    assert view.totals.nodes == 1200
    assert rows < 20, rows  # idle and alike nodes share rows
    assert "1200 nodes shown as" in html
    assert len(html) < 3_000_000 and elapsed < 5.0
    unfolded = render_dashboard(view, aggregate=False)
    assert unfolded.count('<div class="node"') == 1200


def test_cordoned_nodes_are_marked(view: DashboardView) -> None:
    cordoned = dataclasses.replace(view, nodes=(dataclasses.replace(view.nodes[2], schedulable=False),))
    html = render_dashboard(cordoned)
    assert html.count('class="cordon"') == 1 and "t4-0" in html
