"""Time-based fair share on the queue panel: each queue's recent usage (what the latest cycle divided its
over-quota share by) and its GPU use over the window as a sparkline; nothing of it when the feature is off."""

from __future__ import annotations

import math
import re

import pytest

from scheduler.ui import build_view, render_dashboard
from tests.fairshare.test_fairshare_scenarios import FAIRSHARE, HOUR, alternating, run_until


@pytest.fixture(scope="module")
def at_49h() -> tuple[str, dict[str, object]]:
    rec, timeline = alternating(FAIRSHARE)
    run_until(rec, timeline, 49 * HOUR)
    view = build_view(rec.sched)
    return render_dashboard(view), {q.name: q for q in view.queues}


def test_the_queue_view_carries_recent_usage_and_its_series(at_49h: tuple[str, dict[str, object]]) -> None:
    _, queues = at_49h
    a, b = queues["team-a"], queues["team-b"]
    assert 0 < a.recent_usage["gpu"] < b.recent_usage["gpu"] < 1  # type: ignore[attr-defined]
    # One value per bucket of the window so far (3d / 168: about 26 minutes): team-a held the cluster on
    # day 0, team-b on day 1, team-a 7 of 8 GPUs since 48h.
    series_a, series_b = a.usage_series, b.usage_series  # type: ignore[attr-defined]
    # (the last cycle ran just after 48h: nothing happened after it until 52h)
    assert len(series_a) == len(series_b) == math.ceil(48 * HOUR / FAIRSHARE.bucket_s) + 1
    day = int(24 * HOUR // FAIRSHARE.bucket_s)
    assert series_a[0] == pytest.approx(1.0) and series_b[0] == 0.0
    assert series_b[day + 5] == pytest.approx(1.0) and series_a[day + 5] == 0.0
    assert series_a[-1] == pytest.approx(0.875)


def test_the_panel_shows_a_recent_use_column_with_sparklines(at_49h: tuple[str, dict[str, object]]) -> None:
    html, queues = at_49h
    assert html.count("<th>recent use</th>") == 3  # one per resource table
    row = re.search(r'<tr data-queue="team-a">.*?</tr>', html, re.S)
    assert row is not None and '<svg class="spark"' in row.group(0)
    pct = f"{queues['team-a'].recent_usage['gpu']:.0%}"  # type: ignore[attr-defined]
    assert f"</svg> {pct}</td>" in row.group(0)
    assert "recent use: the share of the cluster a queue held over the last 3d, half-life 12h" in html


def test_nothing_of_it_when_time_based_fair_share_is_off() -> None:
    rec, timeline = alternating(None)
    run_until(rec, timeline, 49 * HOUR)
    html = render_dashboard(build_view(rec.sched))
    assert "recent use" not in html and 'class="spark"' not in html
