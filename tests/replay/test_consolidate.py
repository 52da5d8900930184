"""`tessera replay --consolidate`: a pod that fits nowhere is placed by moving others, every move counted."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.placement.placer import place_one, placement_at
from scheduler.placement.registry import make_policy
from scheduler.replay import protocol
from scheduler.replay.consolidate import Consolidator
from scheduler.replay.protocol import build_state, replay_seed
from scheduler.replay.trace import TraceNode, TracePod, load_nodes, load_pods
from scheduler.state.backend import namespace
from scheduler.state.cluster_state import ClusterState
from tests.replay.conftest import pod_row, write_nodes, write_pods
from tests.replay.test_replay_cli import _app


def _cluster(gpus_per_node: list[int]) -> tuple[ClusterState, Consolidator]:
    nodes = [TraceNode(sn=f"n{i}", cpu_milli=64000, memory_mib=262144, gpu=g, model="G2") for i, g in
             enumerate(gpus_per_node)]  # fmt: skip
    state = build_state(namespace("numpy"), nodes)
    return state, Consolidator(state, make_policy("bestfit"), random.Random(1))


def _put(state: ClusterState, mover: Consolidator, pid: int, row: int, slot: int, milli: int) -> None:
    d = TracePod(name=f"p{pid}", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=milli).demand()
    pl = placement_at(state, row, [slot], d)
    state.place(pl)
    state.commit()
    mover.placed(pid, d, pl)


def _consistent(state: ClusterState, mover: Consolidator) -> None:
    """Every GPU's free milli is its capacity less what the pods the consolidator tracks hold there:
    nothing over-committed, nothing lost or counted twice by the moves."""
    held: dict[tuple[int, int], int] = {}
    for _, pl in mover._held.values():
        for g in pl.gpus:
            held[(pl.node, g.slot)] = held.get((pl.node, g.slot), 0) + g.milli
    for row in range(state.num_rows):
        for slot, free in enumerate(state.node_gpu_row(row)):
            assert 0 <= free <= MILLI_PER_GPU
            assert free + held.get((row, slot), 0) == MILLI_PER_GPU


def test_a_whole_gpu_pod_is_placed_by_moving_the_fewest_pods() -> None:
    state, mover = _cluster([1, 1, 1])
    _put(state, mover, 0, 0, 0, 700)  # n0: 300 free
    _put(state, mover, 1, 1, 0, 200)  # n1: 800 free
    _put(state, mover, 2, 1, 0, 150)  # n1: 650 free
    _put(state, mover, 3, 2, 0, 850)  # n2: 150 free
    whole = TracePod(name="w", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=1000).demand()
    assert place_one(state, mover.policy, whole) is None  # fits nowhere as it is
    pl = mover.make_room(9, whole)
    assert pl is not None and pl.node == 1  # n1's 200 goes to n0, its 150 to n2; n0's 700 fits nowhere
    assert (mover.moves, mover.consolidations) == (2, 1)
    assert [state.node_gpu_row(r) for r in range(3)] == [[100], [0], [0]]
    _consistent(state, mover)


def test_one_move_is_preferred_to_two() -> None:
    state, mover = _cluster([1, 1, 1])
    _put(state, mover, 0, 0, 0, 500)  # n0: 500 free
    _put(state, mover, 1, 1, 0, 200)  # n1: 200, 200: two moves to free it
    _put(state, mover, 2, 1, 0, 200)
    _put(state, mover, 3, 2, 0, 450)  # n2: one move
    pod = TracePod(name="w", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=1000).demand()
    pl = mover.make_room(9, pod)
    assert pl is not None and pl.node == 2 and mover.moves == 1
    _consistent(state, mover)


def test_nothing_moves_when_no_pod_has_anywhere_to_go() -> None:
    state, mover = _cluster([1, 1])
    _put(state, mover, 0, 0, 0, 700)
    _put(state, mover, 1, 1, 0, 700)
    pod = TracePod(name="w", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=600).demand()
    before = [state.node_gpu_row(r) for r in range(2)]
    assert mover.make_room(9, pod) is None  # 600 free in all, in pieces of 300: no 700 fits a 300
    assert [state.node_gpu_row(r) for r in range(2)] == before and mover.moves == 0
    assert mover.tried == 1  # it was fragmentation, and it was searched
    _consistent(state, mover)


def test_short_of_capacity_is_not_searched() -> None:
    state, mover = _cluster([1, 1])
    _put(state, mover, 0, 0, 0, 700)
    _put(state, mover, 1, 1, 0, 800)
    pod = TracePod(name="w", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=1000).demand()
    assert mover.make_room(9, pod) is None and mover.tried == 0  # 500 free < 1000: not fragmentation


def _fragmenting_trace(tmp_path: Path) -> tuple[Path, Path]:
    """Single-GPU and 4-GPU nodes, fractions of awkward sizes and whole GPUs: `random` fragments it."""
    rng = random.Random(5)
    nodes = [f"n{i:02d},32000,131072,{1 if i % 3 else 4},G2" for i in range(18)]
    pods = []
    for i in range(60):
        milli = rng.choice([150, 300, 450, 600, 1000, 1000])
        pods.append(pod_row(f"p{i:03d}", 1000, 2048, 1, milli))
    return write_nodes(tmp_path / "nodes.csv", nodes), write_pods(tmp_path / "pods.csv", pods)


@pytest.mark.parametrize("policy", ["random", "wastefit"])
def test_replay_with_moves_counts_them_and_never_over_commits(
    tmp_path: Path, policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes_csv, pods_csv = _fragmenting_trace(tmp_path)
    nodes, pods = load_nodes(nodes_csv).rows, load_pods(pods_csv).rows
    xp = namespace("numpy")
    movers: list[Consolidator] = []
    real = protocol.Consolidator

    def keep(*args: object) -> Consolidator:
        movers.append(real(*args))  # type: ignore[arg-type]
        return movers[-1]

    monkeypatch.setattr(protocol, "Consolidator", keep)
    strict = replay_seed(xp, nodes, pods, policy, 42)
    moved = replay_seed(xp, nodes, pods, policy, 42, consolidate=True)
    assert strict.moves is None and moved.moves is not None
    assert len(movers) == 1
    _consistent(movers[0].state, movers[0])  # after every move, the arrays and the pods agree
    m = moved.moves
    assert m.placed > 0
    if policy == "random":
        assert m.moved > 0 and m.consolidated > 0  # random leaves room in pieces: moves place pods
    assert m.moved >= m.consolidated  # each placement by moves moved at least one pod
    values = moved.curve.allocated_pct
    assert values == tuple(sorted(values))  # moves never lose a placed pod
    again = replay_seed(xp, nodes, pods, policy, 42, consolidate=True)
    assert (again.curve, again.failed, again.moves) == (moved.curve, moved.failed, moved.moves)


def test_cli_consolidate_json(tmp_path: Path) -> None:
    nodes_csv, pods_csv = _fragmenting_trace(tmp_path)
    args = ["replay", "--nodes", str(nodes_csv), "--pods", str(pods_csv), "-p", "random", "--seeds", "1-2"]
    out = CliRunner().invoke(_app(), [*args, "--consolidate", "--bound", "--output", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout[out.stdout.index("{") :])
    assert doc["protocol"] == "consolidate"
    per_seed = [s["consolidation"] for s in doc["per_seed"]]
    assert doc["moves_at_100"] == sum(s["moves"] for s in per_seed)
    placed = sum(s["placed"] for s in per_seed)
    assert doc["moves_per_placed_pod"] == pytest.approx(doc["moves_at_100"] / placed, abs=1e-5)
    bound = doc["lower_bound"]["mean"]
    assert bound <= doc["lower_bound_same_fractions"]["mean"] + 1e-9  # a floor only tightens the LP
    assert bound <= doc["unallocated_pct_at_100"] + 1e-9
    strict = CliRunner().invoke(_app(), [*args, "--output", "json"])
    assert json.loads(strict.stdout[strict.stdout.index("{") :])["protocol"] == "strict"
    both = CliRunner().invoke(_app(), ["replay", "--all-variants", str(tmp_path), "--consolidate"])
    assert both.exit_code == 2 and "not with --all-variants" in both.output
