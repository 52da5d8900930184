"""The view-model: what the dashboard says about a small cluster whose state is known exactly."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.sim.cluster import SimCluster
from scheduler.sim.loader import Manifests
from scheduler.ui import build_view
from scheduler.ui.aggregate import group_nodes
from scheduler.ui.colors import OTHER_QUEUE, PALETTE, queue_colors
from scheduler.ui.view import DashboardView
from tests.framework.helpers import A100, node, pod, run
from tests.ui.scenario import LONG, report_for, small_cluster


@pytest.fixture(scope="module")
def view() -> DashboardView:
    _, sched = small_cluster()
    return build_view(sched)


def cells(view: DashboardView, name: str) -> dict[int, list[tuple[str, str, int]]]:
    row = next(n for n in view.nodes if n.name == name)
    return {g.index: [(s.pod, s.queue, s.milli) for s in g.slices] for g in row.gpus}


def test_gpu_cells_hold_the_fractions_placed(view: DashboardView) -> None:
    a0 = cells(view, "a100-0")
    assert a0[0] == [("team-a/half", "team-a", 500), ("team-b/quarter", "team-b", 250)]
    assert a0[1] == a0[2] == [("team-a/whole2", "team-a", 1000)]
    assert a0[3] == []
    assert all(not s for s in cells(view, "a100-1").values())
    for n in view.nodes:  # what the cells show adds up with the scheduler's free milli
        for g in n.gpus:
            assert g.used_milli + g.free_milli == MILLI_PER_GPU
    assert [n.pool for n in view.nodes] == ["a100", "a100", "t4"]


def test_totals(view: DashboardView) -> None:
    t = view.totals
    assert (t.nodes, t.gpus, t.allocated_milli, t.running_pods, t.pending_pods) == (3, 10, 2750, 3, 5)
    assert t.stranded_milli == 250  # the free quarter of the shared GPU
    assert t.allocated_pct == pytest.approx(27.5)


def test_queues_in_tree_order_with_figures(view: DashboardView) -> None:
    assert [(q.name, q.depth, q.is_leaf) for q in view.queues] == [
        ("default", 0, True), ("org", 0, False), ("team-a", 1, True), ("team-b", 1, True),
    ]  # fmt: skip
    a, b = view.queues[2].resources["gpu"], view.queues[3].resources["gpu"]
    assert (a.quota, a.allocated, a.limit) == (4, 2.5, -1)
    assert (b.quota, b.allocated, b.limit) == (2, 0.25, 20)
    assert b.requested == pytest.approx(0.25 + 8 + 12)  # allocated + big + the gang
    org = view.queues[1].resources["gpu"]
    assert org.allocated == pytest.approx(a.allocated + b.allocated)


def test_pending_grouped_by_reason_with_gangs_folded(view: DashboardView) -> None:
    groups = {g.reason: g for g in view.pending}
    assert set(groups) == {"GangUnschedulable", "InvalidRequest", "Unschedulable"}
    gang = groups["GangUnschedulable"].entries[0].subjects
    assert [(s.kind, s.key, s.pods, s.queue) for s in gang] == [("gang", "team-b/ddp", 3, "team-b")]
    assert groups["GangUnschedulable"].pods == 3
    (big,) = groups["Unschedulable"].entries
    assert "8 whole GPUs" in big.message and big.subjects[0].key == "team-b/big"
    assert big.subjects[0].waiting_s == pytest.approx(2.0)  # simulated clock, not the wall clock
    assert "1.5" in groups["InvalidRequest"].entries[0].message


def test_nvml_reports_show_measured_use_and_health() -> None:
    _, sched = small_cluster()
    view = build_view(
        sched, [report_for("a100-0", 4, used_mib=18000, unhealthy=3), report_for("ghost", 1, used_mib=1)]
    )
    row = next(n for n in view.nodes if n.name == "a100-0")
    g0, g3 = row.gpus[0], row.gpus[3]
    assert g0.measured is not None and g0.measured.memory_used_mib == 18000
    assert g0.measured.utilization_pct == 87.0 and g0.measured.pods[0].pod == "team-a/half"
    assert g0.uuid == "GPU-test-a100-0-0"
    assert not g3.healthy and g3.health_reason and "Xid 79" in g3.health_reason
    assert view.totals.unhealthy_gpus == 1
    assert all(g.measured is None for n in view.nodes if n.name != "a100-0" for g in n.gpus)


def test_pods_of_other_schedulers_take_gpus_but_no_queue() -> None:
    foreign = pod("foreign", "team-a", arrival_s=0, duration_s=LONG, gpus=1)
    foreign["spec"]["schedulerName"] = "default-scheduler"
    foreign["spec"]["nodeName"] = "n0"
    foreign["status"] = {"phase": "Running"}
    m = Manifests()
    m.objects["Node"].append(node("n0", A100, 2, 16, 64))
    m.objects["Pod"].append(foreign)
    sim = SimCluster.from_manifests(m)
    sched = Scheduler(sim, SchedulerConfig(backend="numpy"))
    run(sim, sched)
    view = build_view(sched)
    assert [(s.pod, s.queue, s.milli) for s in view.nodes[0].gpus[0].slices] == [
        ("team-a/foreign", OTHER_QUEUE, 1000)
    ]
    assert view.totals.pending_pods == 0


def test_colors_are_stable_and_distinct() -> None:
    c = queue_colors(["a", "b", "a", "c"])
    assert [c["a"], c["b"], c["c"]] == list(PALETTE[:3])
    many = queue_colors([f"q{i}" for i in range(40)])
    assert len({many[f"q{i}"] for i in range(40)}) == 40


def test_identical_nodes_fold_into_one_row(view: DashboardView) -> None:
    unfolded = group_nodes(view.nodes, aggregate=False)
    assert [g.count for g in unfolded] == [1, 1, 1]
    folded = group_nodes(view.nodes, aggregate=True)
    # a100-1 is idle and alone in its look; a100-0 differs; t4-0 is another model.
    assert [g.members for g in folded] == [("a100-0",), ("a100-1",), ("t4-0",)]
    twin = dataclasses.replace(view.nodes[1], name="a100-2")
    assert [g.members for g in group_nodes([*view.nodes, twin], aggregate=True)][1] == ("a100-1", "a100-2")
