"""The replay report: curves validated, ranked, drawn; the published CSV read at render time."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.ui import build_view
from scheduler.ui.replay_curves import load_reference_curves, parse_curves, policy_key
from scheduler.ui.replay_report import render_replay_report
from tests.ui.scenario import small_cluster


def curve(policy: str, plateau: float) -> dict[str, object]:
    pts = [{"arrived_pct": a, "allocated_pct": min(a, plateau)} for a in range(0, 131, 10)]
    return {"policy": policy, "curve": pts[::-1], "unallocated_pct_at_100": 100 - plateau}


def test_bad_curves_are_skipped_with_a_line_each() -> None:
    good, errors = parse_curves(
        [
            curve("fgd", 95),
            {"policy": "x", "curve": [{"arrived_pct": 1, "allocated_pct": "nan"}]},
            {"curve": []},
        ]
    )
    assert [c.policy for c in good] == ["fgd"]
    assert [p.arrived_pct for p in good[0].curve] == sorted(p.arrived_pct for p in good[0].curve)
    assert len(errors) == 2 and errors[0].startswith("curve x: curve.0.allocated_pct")
    assert "policy" in errors[1]


def test_unallocated_at_100_falls_back_to_the_curve() -> None:
    (c,), _ = parse_curves([{"policy": "p", "curve": [{"arrived_pct": 100, "allocated_pct": 91.5}]}])
    assert c.unallocated_at_100() == pytest.approx(8.5)
    assert policy_key("06-FGD") == policy_key("fgd") == "fgd"


def test_reference_csv_is_averaged_over_seeds(tmp_path: Path) -> None:
    csv = tmp_path / "curves.csv"
    csv.write_text(
        "workload,sc_policy,tune,seed,total_gpus,0,100\n"
        "w,06-FGD,1.3,42,10,0,94\n"
        "w,06-FGD,1.3,43,10,0,96\n"
        "w,01-Random,1.3,42,10,0,86\n"
        "w,01-Random,1.3,43,10,0\n"
        "w,01-Random,1.3,44,10,0,abc\n"
    )
    curves, errors = load_reference_curves(csv)
    by = {c.policy: c for c in curves}
    assert by["06-FGD"].unallocated_at_100() == pytest.approx(5.0)
    assert by["01-Random"].unallocated_at_100() == pytest.approx(14.0)
    assert len(errors) == 2 and ":5:" in errors[0] and ":6:" in errors[1]
    bad = tmp_path / "other.csv"
    bad.write_text("a,b\n1,2\n")
    assert load_reference_curves(bad)[0] == []


def test_report_ranks_policies_and_matches_published_ones() -> None:
    _, sched = small_cluster()
    html = render_replay_report(
        [curve("binpack", 92), curve("fgd", 95), {"policy": "broken"}],
        reference=[curve("06-FGD", 95.2)],
        view=build_view(sched),
    )
    assert html.index('data-policy="fgd"') < html.index('data-policy="binpack"')  # least unallocated first
    assert '<td>fgd</td><td class="num">5.00</td><td class="num">4.80</td>' in html
    assert "06-FGD (published)" in html and "stroke-dasharray" in html
    assert "curve broken:" in html  # skipped input is listed, the rest still drawn
    assert 'data-pod="team-a/half"' in html  # the cluster at the end, with the dashboard's panels
    assert html.count("<svg") == 2


def test_report_without_reference_or_view() -> None:
    html = render_replay_report([curve("spread", 88)])
    assert "published" not in html.split('id="curves"')[0]
    assert 'id="map"' not in html and "12.00" in html
