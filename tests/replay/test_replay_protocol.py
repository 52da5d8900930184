from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.replay.curve import bin_curve
from scheduler.replay.protocol import arrival_order, capacity_milli, replay_seed
from scheduler.replay.trace import load_nodes, load_pods
from scheduler.state.backend import namespace


def test_arrival_order_shuffles_by_seed_and_inflates_to_tune(trace: tuple[Path, Path]) -> None:
    nodes, pods = load_nodes(trace[0]).rows, load_pods(trace[1]).rows
    cap = capacity_milli(nodes)
    a, b, c = (arrival_order(pods, s, 1.3, cap) for s in (42, 42, 43))
    assert [p.name for p in a] == [p.name for p in b]  # same seed, same order
    assert [p.name for p in a] != [p.name for p in c]
    head = a[: len(pods)]
    assert sorted(p.name for p in head) == sorted(p.name for p in pods)  # every original pod once first
    total = sum(p.gpu_request_milli for p in a)
    assert total <= 1.3 * cap
    assert total > 1.3 * cap - 8000  # stopped only when the next draw would overshoot (max pod 4 GPUs here)
    # shuffling starts from the name-sorted list: input order does not matter
    assert [p.name for p in arrival_order(list(reversed(pods)), 42, 1.3, cap)] == [p.name for p in a]


def test_no_inflation_below_original_total(trace: tuple[Path, Path]) -> None:
    nodes, pods = load_nodes(trace[0]).rows, load_pods(trace[1]).rows
    cap = capacity_milli(nodes)
    order = arrival_order(pods, 1, 0.1, cap)
    assert len(order) < len(pods)  # thinned, never inflated
    assert sum(p.gpu_request_milli for p in order) <= 0.1 * cap


def test_bin_curve_rounds_half_up_averages_and_carries_forward() -> None:
    cap = 1000
    arrived = [0, 4, 5, 6, 30, 30]
    used = [0, 4, 5, 0, 20, 30]
    curve = bin_curve(arrived, used, cap, max_bin=4)
    # bins: 0.0->0, 0.4->0, 0.5->1 (half up), 0.6->1, 3.0->3, 3.0->3; bin 2 empty -> carries bin 1
    assert curve.allocated_pct[0] == pytest.approx((0 + 0.4) / 2)
    assert curve.allocated_pct[1] == pytest.approx((0.5 + 0.0) / 2)
    assert curve.allocated_pct[2] == curve.allocated_pct[1]
    assert curve.allocated_pct[3] == pytest.approx(2.5)
    assert curve.allocated_pct[4] == curve.allocated_pct[3]
    with pytest.raises(ValueError):
        bin_curve([1], [1], 0)


@pytest.mark.parametrize("policy", ["random", "bestfit", "fgd"])
def test_replay_invariants(trace: tuple[Path, Path], policy: str) -> None:
    xp = namespace("numpy")
    nodes, pods = load_nodes(trace[0]).rows, load_pods(trace[1]).rows
    r = replay_seed(xp, nodes, pods, policy, 42)
    assert r.attempted == len(arrival_order(pods, 42, 1.3, capacity_milli(nodes)))
    assert 0 < r.failed < r.attempted
    values = r.curve.allocated_pct
    assert len(values) == 131
    assert all(0.0 <= v <= 100.0 for v in values)
    assert all(v <= i + 0.5 + 1e-9 for i, v in enumerate(values))  # never more allocated than arrived
    assert values == tuple(sorted(values))  # pods never leave
    again = replay_seed(xp, nodes, pods, policy, 42)
    assert again.curve == r.curve and again.failed == r.failed  # deterministic per seed


def test_a_list_asking_more_than_tune_is_thinned_at_random() -> None:
    """As the simulator's tuneDownPods: random pods leave until the GPU request fits tune x capacity."""
    from scheduler.replay.protocol import arrival_order
    from scheduler.replay.trace import TracePod

    pods = [TracePod(name=f"p{i:02d}", cpu_milli=1000, num_gpu=1, gpu_milli=1000) for i in range(30)]
    order = arrival_order(pods, 5, 1.3, 10_000)  # 30 GPUs asked of 10, target 13
    assert sum(p.gpu_request_milli for p in order) == 13_000
    assert len({p.name for p in order}) == 13
    assert order == arrival_order(pods, 5, 1.3, 10_000)
    assert order != arrival_order(pods, 6, 1.3, 10_000)
