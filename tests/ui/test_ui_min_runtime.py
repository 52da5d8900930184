"""The dashboard shows minimum runtimes (each queue's, inherited ones named; how long a running pod's
job is still protected: docs/min-runtime.md) and what an elastic gang waiting to grow runs (docs/elastic.md)."""

from __future__ import annotations

from pathlib import Path

from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.sim.cluster import SimCluster
from scheduler.sim.loader import load_files
from scheduler.ui import build_view, render_dashboard

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def _at(name: str, t: float) -> Scheduler:
    sim = SimCluster.from_manifests(load_files([SCENARIOS / f"{name}.yaml"]))
    sched = Scheduler(sim, SchedulerConfig(backend="numpy", expected_nodes=8))
    now = 0.0
    while now <= t:
        sim.advance(now)
        sched.run_cycle()
        now += 1.0
    return sched


def test_queue_panel_shows_min_runtimes_and_where_they_come_from() -> None:
    view = build_view(_at("preempt-min-runtime", 30))
    shown = {q.name: q.min_runtime for q in view.queues}
    assert shown["lab"] == "min runtime: preempt 5m"
    assert shown["research"] == "min runtime: preempt 5m (from lab)"
    assert shown["default"] == ""
    assert "min runtime: preempt 5m (from lab)" in render_dashboard(view)


def test_a_protected_pod_says_for_how_long() -> None:
    view = build_view(_at("reclaim-min-runtime", 60))
    notes = {s.pod: s.protected for n in view.nodes for g in n.gpus for s in g.slices}
    assert notes["team-a/a-0"] == "protected from reclaim by sibling queues for 9m"  # started at t=0
    assert notes["team-a/a-7"] == "protected from reclaim by sibling queues for 9m7s"
    page = render_dashboard(view)
    assert (
        "team-a/a-0 · queue team-a · 1 GPU · 40.0 GiB · protected from reclaim by sibling queues for 9m"
        in page
    )


def test_an_elastic_gang_waiting_to_grow_says_what_it_runs() -> None:
    view = build_view(_at("elastic-gang", 30))
    subjects = [s for g in view.pending for e in g.entries for s in e.subjects if s.kind == "gang"]
    (ddp,) = [s for s in subjects if s.key == "team-a/ddp"]
    assert ddp.pods == 4 and ddp.note == "elastic: 4 of 8 running, minMember 2"
    assert "elastic: 4 of 8 running, minMember 2" in render_dashboard(view)
