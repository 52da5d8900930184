"""Property: random sequences of what users, operators and kubelets do, through the real scheduling cycle on
the simulated cluster; after every cycle no GPU is over-committed, the arrays equal the running pods, no
gang runs partly, no bind breaks a queue limit, no pod is bound twice, every pending pod is told why
(tests/property/world.py says how each is computed from scratch).

Pods of every request kind (fraction, gpu-memory, fractions on several GPUs, whole GPUs, CPU only), gangs
(complete and incomplete), arrivals and completions, deletions (recreated by their controller or not),
queue relabels of pending and running pods, hostile annotations, nodes deleted and re-registered, GPU
counts that dip and come back, queue limit edits and deletions, PodGroup edits.

CI runs `TESSERA_PROPERTY_EXAMPLES` sequences (default 300, well under a minute); a long run:

    TESSERA_PROPERTY_EXAMPLES=5000 TESSERA_PROPERTY_REPORT=property.json \\
        python -m pytest -q -p no:cacheprovider --timeout=0 tests/property/test_operation_sequences.py

writes the counts (sequences, cycles, operations by kind, binds, limit checks) to `property.json`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st

from tests.property.world import LEAVES, MODELS, QUEUES, Op, Stats, World

EXAMPLES = int(os.environ.get("TESSERA_PROPERTY_EXAMPLES", "300"))
STATS = Stats()

requests = st.one_of(
    st.tuples(st.just("fraction"), st.sampled_from(["0.1", "0.25", "0.5", "0.75", "0.9"]), st.integers(1, 2)),
    st.tuples(st.just("memory"), st.sampled_from(["4000", "10000", "20000", "40000"]), st.integers(1, 2)),
    st.tuples(st.just("whole"), st.just(""), st.integers(1, 4)),
    st.tuples(st.just("cpu"), st.just(""), st.just(0)),
)
queue_names = st.sampled_from([*LEAVES, *LEAVES, "org", "ghost"])  # leaves mostly; a parent; a missing one
limits = st.sampled_from([-1, -1, 0, 1, 2, 4, 8])
index = st.integers(0, 1000)
submit = st.tuples(
    st.just("submit"),
    requests,
    queue_names,
    st.sampled_from(["train", "build", "inference"]),
    st.sampled_from([0, 5, 20, 60]),
)
gang = st.tuples(st.just("gang"), requests, queue_names, st.integers(2, 3), st.integers(-1, 1))
operation: st.SearchStrategy[Op] = st.one_of(
    submit, submit, submit, gang, gang,  # arrivals weigh more: they are what fills the cluster
    st.tuples(st.just("delete"), index, st.booleans()),
    st.tuples(st.just("relabel"), index, st.booleans(), queue_names),
    st.tuples(st.just("hostile"), index, st.booleans(), index, index),
    st.tuples(st.just("node_delete"), index),
    st.tuples(st.just("node_add"), index, st.one_of(st.none(), st.integers(0, 8))),
    st.tuples(st.just("queue_edit"), st.sampled_from([q for q, _ in QUEUES]), limits),
    st.tuples(st.just("queue_delete"), st.sampled_from([q for q, _ in QUEUES if q != "default"])),
    st.tuples(st.just("group_edit"), index, st.integers(1, 4)),
    st.tuples(st.just("tick"), st.integers(1, 40)),
)  # fmt: skip
worlds = st.fixed_dictionaries({
    "nodes": st.lists(st.tuples(st.sampled_from(sorted(MODELS)), st.integers(1, 8)), min_size=1, max_size=4),
    "limits": st.dictionaries(st.sampled_from([q for q, _ in QUEUES]), limits, max_size=3),
})  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def report(request: pytest.FixtureRequest) -> Iterator[None]:
    failed = request.session.testsfailed
    yield
    path = os.environ.get("TESSERA_PROPERTY_REPORT")
    if path:
        counts = {"examples": EXAMPLES, **STATS.as_dict()}
        counts["violations"] = (
            request.session.testsfailed - failed
        )  # a failed test: see its falsifying example
        with open(path, "w") as f:
            json.dump(counts, f, indent=2)


# Sequences the long runs found (each failed once; kept so they are run every time).
FOUND = [
    # An eviction tried (and rolled back) on a GPU that had left the node's count: the GPU was retired on
    # the release and the roll-back found no GPU to put the pod back on.
    ([("A100", 2)], [
        ("submit", ("fraction", "0.5", 1), "default", "train", 0),
        *[("submit", ("fraction", "0.1", 1), "default", "train", 0)] * 4,
        ("submit", ("fraction", "0.1", 1), "default", "inference", 0),
        ("gang", ("fraction", "0.1", 1), "b", 2, 1),
        ("node_add", 410, 1),
        *[("submit", ("fraction", "0.1", 1), "default", "train", 0)] * 3,
        ("submit", ("fraction", "0.1", 1), "b", "build", 0),
    ]),
    # A running whole-GPU pod given a hostile annotation was moved by consolidation as a CPU pod.
    ([("A100", 2)], [
        ("submit", ("whole", "", 1), "default", "train", 0),
        *[("submit", ("fraction", "0.1", 1), "default", "train", 0)] * 3,
        ("hostile", 0, True, 0, 0),
        ("submit", ("fraction", "0.1", 2), "default", "train", 0),
    ]),
    # A running pod made unreadable (labels not a map), then deleted: it stayed in the plan while it
    # terminated (any other pod being deleted leaves it).
    ([("A100", 1)], [
        *[("submit", ("fraction", "0.1", 1), "default", "train", 0)] * 2,
        ("node_delete", 0),
        ("submit", ("fraction", "0.1", 1), "default", "train", 0),
        ("hostile", 0, True, 3, 0),
        ("delete", 0, False),
    ]),
    # A pod pipelined behind a terminating pod was told nothing in that cycle.
    ([("A100", 1), ("A100", 1)], [
        *[("submit", ("whole", "", 1), "default", "train", 0)] * 2,
        ("delete", 0, False),
        ("submit", ("whole", "", 1), "default", "train", 0),
    ]),
    # A pipelined pod relabelled to a queue that does not exist was bound into it once its victim left.
    ([("A100", 1), ("A100", 1)], [
        ("submit", ("whole", "", 1), "default", "train", 0),
        ("submit", ("fraction", "0.1", 1), "default", "train", 0),
        ("delete", 0, False),
        ("submit", ("whole", "", 1), "default", "inference", 0),
        ("relabel", 0, False, "ghost"),
        ("tick", 37),
    ]),
    # A pipelined pod was bound into its queue after that queue's limit was lowered to 0 while it waited.
    ([("A100", 1)], [
        *[("submit", ("fraction", "0.1", 1), "default", "train", 0)] * 4,
        ("submit", ("fraction", "0.1", 1), "a", "train", 0),
        *[("submit", ("fraction", "0.25", 1), "default", "train", 0)] * 2,
        ("submit", ("fraction", "0.5", 1), "default", "train", 0),
        ("delete", 0, False),
        *[("submit", ("fraction", "0.1", 1), "default", "train", 0)] * 3,
        ("queue_edit", "default", 0),
        ("delete", 0, False),
        ("submit", ("fraction", "0.1", 1), "default", "train", 0),
        ("tick", 22),
    ]),
]  # fmt: skip


def _found(test: Callable[..., None]) -> Callable[..., None]:
    for nodes, script in reversed(FOUND):
        test = example(world={"nodes": nodes, "limits": {}}, script=script)(test)
    return test


# CI draws the same sequences every run (seed 0), so a red CI is a change and not the draw. Drawing at
# random (TESSERA_PROPERTY_RANDOM=1) currently finds an open bug: a gang can run below minMember after
# hostile edits (seen as "gang ns/g7 runs 2 of 3"; one case kept below as a strict xfail).
_draws = (lambda test: test) if os.environ.get("TESSERA_PROPERTY_RANDOM") else seed(0)


@_draws
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(world=worlds, script=st.lists(operation, min_size=10, max_size=40))
@_found
def test_operation_sequences_keep_every_invariant(world: dict, script: list[Op]) -> None:
    w = World(world["nodes"], world["limits"], STATS)
    STATS.sequences += 1
    w.cycle()
    for op in script:
        w.do(op)
        w.cycle()


# Found by a CI run (3 December 2026), not fixed yet: a gang of two whose members' labels are made a list
# (unreadable: InvalidRequest) on a one-GPU cluster ends with one member running. The bind echo's crash on
# such labels is fixed (`mirror._bind_echo`); the gang invariant still fails, on main before that too.
GANG_WITH_UNREADABLE_LABELS: list[Op] = [
    ("submit", ("whole", "", 1), "default", "train", 0),
    ("delete", 0, False), ("tick", 1), ("tick", 20),
    ("delete", 0, False), ("delete", 0, False), ("delete", 0, False),
    ("hostile", 0, False, 0, 0),
    ("gang", ("fraction", "0.1", 1), "a", 2, 0),
    ("hostile", 0, False, 3, 0),
]  # fmt: skip


@pytest.mark.xfail(strict=True, reason="known: a gang member with unreadable labels (see the comment above)")
def test_a_gang_whose_members_turn_unreadable_never_runs_below_min_member() -> None:
    w = World([("A100", 1)], {}, STATS)
    w.cycle()
    for op in GANG_WITH_UNREADABLE_LABELS:
        w.do(op)
        w.cycle()
