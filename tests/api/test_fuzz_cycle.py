"""Fuzz: hostile objects, through `scheduler/model/parse.py` and the CRD models, into the real scheduling cycle
on a simulated cluster. The cycle never raises, the GPUs of the good nodes are never over-committed, and a
good pod next to the hostile ones is still placed. Long run: see tests/api/hostile.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from scheduler.api.keys import MILLI_PER_GPU
from tests.api.hostile import fuzz_settings, hostile_node, hostile_pod, hostile_podgroup, hostile_queue
from tests.framework.helpers import A100, cluster, node, phase, pod, queue, run


@st.composite
def hostile_world(draw: st.DrawFn) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [
        node("good-0", A100, 4, 64, 512),
        queue("default", None, 4),
        queue("team-a", None, 4),
        queue("safe", None, 4),  # the good pod's: no hostile queue names it
    ]
    names = iter(f"h{i}" for i in range(100))
    for name in draw(st.sets(st.sampled_from(["n1", "n2", "bad"]), max_size=3)):
        objects.append(draw(hostile_node(name=name)))
    for _ in range(draw(st.integers(0, 2))):
        objects.append(draw(hostile_queue()))
    for _ in range(draw(st.integers(0, 2))):
        objects.append(draw(hostile_podgroup(name=draw(st.sampled_from(["g", "h"])))))
    for _ in range(draw(st.integers(1, 6))):
        p = draw(hostile_pod(name=next(names)))
        meta = p["metadata"]
        if not isinstance(p.get("spec"), dict) or not all(
            isinstance(meta.get(k), dict) for k in ("labels", "annotations")
        ):
            # Maps that are not maps: the API server never sends those (the parser fuzz covers them) and
            # the simulated cluster, our harness, does not take them.
            continue
        if draw(st.booleans()):  # a pod of the gang
            meta["annotations"]["tessera.dev/pod-group"] = "g"
        objects.append(p)
    return objects


@fuzz_settings(scale=0.3)
@given(hostile_world())
def test_hostile_objects_never_stop_the_cycle(objects: list[dict[str, Any]]) -> None:
    good = pod("good", "safe", arrival_s=0, duration_s=1000, annotations={"gpu-fraction": "0.5"})
    good["metadata"]["namespace"] = "ok"
    sim, sched = cluster([*objects, good])
    run(sim, sched, cycles=3)
    state = sched.cache.state
    row = state.row_of("good-0")
    assert row is not None
    for j in range(4):
        assert 0 <= int(state.free_milli[row, j]) <= MILLI_PER_GPU
    assert phase(sim, "ok/good") == "Running"


@st.composite
def hostile_updates(draw: st.DrawFn) -> list[tuple[str, dict[str, Any]]]:
    """Later MODIFIED events: the good node re-labelled or re-sized, new hostile nodes and queues."""
    out: list[tuple[str, dict[str, Any]]] = []
    for _ in range(draw(st.integers(1, 3))):
        out.append(("Node", draw(hostile_node(name=draw(st.sampled_from(["good-0", "n1", "n2"]))))))
    if draw(st.booleans()):
        out.append(("Queue", draw(hostile_queue())))
    return out


@fuzz_settings(scale=0.3)
@given(hostile_world(), hostile_updates())
def test_hostile_updates_never_stop_the_cycle(
    objects: list[dict[str, Any]], updates: list[tuple[str, dict[str, Any]]]
) -> None:
    good = pod("good", "safe", arrival_s=0, duration_s=1000, annotations={"gpu-fraction": "0.5"})
    good["metadata"]["namespace"] = "ok"
    sim, sched = cluster([*objects, good])
    run(sim, sched, cycles=2)
    for kind, obj in updates:
        if kind == "Node":
            sim.nodes[obj["metadata"]["name"]] = obj
        sim._emit(kind, "MODIFIED", obj)  # type: ignore[arg-type]
    run(sim, sched, cycles=2)
