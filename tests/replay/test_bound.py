"""The LP bound: never below the true optimum (brute force on small instances), certified by its duals,
reached by an explicit placement where the packing is easy, and reported by `tessera replay --bound`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.replay.bound import _Lp, arrived_at, lp_bound, maximal_patterns, solve_bound
from scheduler.replay.offline import lp_guided_placement
from scheduler.replay.protocol import arrival_order, capacity_milli
from scheduler.replay.trace import TraceNode, TracePod, load_nodes, load_pods
from scheduler.state.backend import namespace

pytest.importorskip("highspy", reason="the bound needs HiGHS (pip install 'tessera[bound]')")


def _node(name: str, gpus: int, model: str = "G2", cpu: int = 32000, mem: int = 65536) -> TraceNode:
    return TraceNode(sn=name, cpu_milli=cpu, memory_mib=mem, gpu=gpus, model=model)


def _pod(name: str, gpus: int, milli: int, cpu: int = 1000, mem: int = 1024, spec: str = "") -> TracePod:
    return TracePod(name=name, cpu_milli=cpu, memory_mib=mem, num_gpu=gpus, gpu_milli=milli, gpu_spec=spec)


def brute_force_max(nodes: Sequence[TraceNode], pods: Sequence[TracePod]) -> int:
    """The most GPU milli any placement of a subset of `pods` holds (exhaustive search)."""
    free = [[1000] * n.gpu for n in nodes]
    cpu = [n.cpu_milli for n in nodes]
    mem = [n.memory_mib for n in nodes]
    best = 0

    def walk(i: int, placed: int) -> None:
        nonlocal best
        rest = sum(p.gpu_request_milli for p in pods[i:])
        if placed + rest <= best:
            return
        if i == len(pods):
            best = placed
            return
        p = pods[i]
        models = set(p.gpu_spec.split("|")) if p.gpu_spec else None
        for n, node in enumerate(nodes):
            if p.cpu_milli > cpu[n] or p.memory_mib > mem[n]:
                continue
            if p.num_gpu and models is not None and node.model not in models:
                continue
            cpu[n] -= p.cpu_milli
            mem[n] -= p.memory_mib
            if p.num_gpu == 0:
                walk(i + 1, placed)
            elif p.gpu_milli < 1000:
                for g in sorted(set(range(node.gpu)), key=lambda g: free[n][g]):
                    if free[n][g] >= p.gpu_milli and free[n][g] not in (free[n][h] for h in range(g)):
                        free[n][g] -= p.gpu_milli
                        walk(i + 1, placed + p.gpu_milli)
                        free[n][g] += p.gpu_milli
            else:
                whole = [g for g in range(node.gpu) if free[n][g] == 1000][: p.num_gpu]
                if len(whole) == p.num_gpu:
                    for g in whole:
                        free[n][g] = 0
                    walk(i + 1, placed + p.gpu_request_milli)
                    for g in whole:
                        free[n][g] = 1000
            cpu[n] += p.cpu_milli
            mem[n] += p.memory_mib
        walk(i + 1, placed)  # or leave it out

    walk(0, 0)
    return best


def test_maximal_patterns() -> None:
    pats = maximal_patterns([300, 400])
    assert set(pats) == {(3, 0), (2, 1), (0, 2)}  # 900, 1000, 800: nothing more fits in any
    assert maximal_patterns([50, 60, 70], limit=10) is None  # too many: the caller relaxes


def test_810s_leave_190_unless_a_small_pod_fills_it() -> None:
    nodes = [_node("n", 2)]
    pods = [_pod("a", 1, 810), _pod("b", 1, 810), _pod("c", 1, 160)]
    b = lp_bound(nodes, pods, 2000)
    assert b.certified_milli == pytest.approx(1780, abs=1e-6)
    assert brute_force_max(nodes, pods) == 1780


def test_model_cpu_and_memory_are_respected() -> None:
    nodes = [_node("t4", 1, "T4", cpu=4000), _node("g2", 1, "G2")]
    pods = [_pod("only-t4", 1, 1000, cpu=8000, spec="T4"), _pod("g", 1, 1000, mem=70000)]
    assert lp_bound(nodes, pods, 2000).certified_milli == pytest.approx(0, abs=1e-6)
    assert brute_force_max(nodes, pods) == 0


@st.composite
def instances(draw: st.DrawFn) -> tuple[list[TraceNode], list[TracePod]]:
    kinds = [("G2", 2, 16000), ("T4", 1, 8000), ("P100", 2, 6000)]
    nodes = [
        _node(f"n{i}", g, m, cpu=c, mem=draw(st.sampled_from([8192, 65536])))
        for i, (m, g, c) in enumerate(draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=3)))
    ]
    pods = []
    for i in range(draw(st.integers(1, 6))):
        gpus = draw(st.sampled_from([0, 1, 1, 1, 2]))
        milli = (
            0 if gpus == 0 else 1000 if gpus > 1 else draw(st.sampled_from([160, 300, 470, 530, 810, 1000]))
        )
        spec = draw(st.sampled_from(["", "", "T4", "G2|P100"])) if gpus else ""
        cpu = draw(st.sampled_from([1000, 4000, 7000]))
        mem = draw(st.sampled_from([1024, 8192]))
        pods.append(_pod(f"p{i}", gpus, milli, cpu=cpu, mem=mem, spec=spec))
    return nodes, pods


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_bound_is_never_below_the_true_optimum(inst: tuple[list[TraceNode], list[TracePod]]) -> None:
    nodes, pods = inst
    cap = max(1, capacity_milli(nodes))
    b = lp_bound(nodes, pods, cap)
    truth = brute_force_max(nodes, pods)
    assert b.certified_milli >= truth - 1e-9
    assert b.certified_milli >= b.lp_milli - 1e-6  # the certificate never undercuts the LP it certifies
    placed, upper = lp_guided_placement(namespace("numpy"), nodes, pods, cap)
    assert placed.placed_milli <= truth <= upper + 1e-9


def test_a_poor_dual_gives_a_weaker_bound_never_an_unsound_one() -> None:
    lp = _Lp()
    r0, r1 = lp.row(3), lp.row(5)
    lp.col(2, 10, {r0: 1})
    lp.col(3, 10, {r0: 1, r1: 1})
    value, duals = lp.solve()
    assert value == pytest.approx(9)
    assert lp.certify(duals) == Fraction(9)
    assert lp.certify([0.0, 0.0]) == Fraction(50)  # y = 0: sum of c_j u_j
    assert lp.certify([2.5, 0.0]) >= 9


def test_explicit_placement_and_bound_on_a_synthetic_trace(trace: tuple[Path, Path]) -> None:
    nodes, pods = load_nodes(trace[0]).rows, load_pods(trace[1]).rows
    cap = capacity_milli(nodes)
    pre = arrived_at(arrival_order(pods, 42, 1.3, cap), cap)
    assert 0 < len(pre) < len(arrival_order(pods, 42, 1.3, cap))
    bound, relax = solve_bound(nodes, pre, cap)
    placed, upper = lp_guided_placement(namespace("numpy"), nodes, pre, cap)
    assert upper == bound.certified_milli
    assert placed.placed_milli <= upper
    assert placed.unallocated_pct >= bound.unallocated_pct
    assert sum(relax.assignment.values()) <= len(pre) + 1e-6


def test_arrived_at_stops_at_the_last_record_of_the_bin() -> None:
    pods = [_pod(f"p{i}", 1, 1000) for i in range(5)]
    # capacity 3000: records at 33.3, 66.7, 100, 133.3 %: bin 100 ends with the third pod
    assert [p.name for p in arrived_at(pods, 3000)] == ["p0", "p1", "p2"]
    assert len(arrived_at(pods, 100_000)) == 5


def test_replay_bound_in_json_and_table(trace: tuple[Path, Path]) -> None:
    from typer.testing import CliRunner

    from tests.replay.test_replay_cli import _app

    args = [
        "replay",
        "--nodes",
        str(trace[0]),
        "--pods",
        str(trace[1]),
        "-p",
        "fgd",
        "--seeds",
        "1-2",
        "--bound",
    ]
    result = CliRunner().invoke(_app(), [*args, "--output", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)  # nothing but JSON on stdout (HiGHS's banner is silenced)
    bound = doc["lower_bound"]
    assert [s["seed"] for s in bound["per_seed"]] == [1, 2]
    assert bound["mean"] <= doc["unallocated_pct_at_100"] + 1e-9
    table = CliRunner().invoke(_app(), args)
    assert table.exit_code == 0 and "LP bound" in table.stdout
