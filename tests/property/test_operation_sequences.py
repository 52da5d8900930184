"""Property: random sequences of what users, operators and kubelets do, through the real scheduling cycle on
the simulated cluster; after every cycle no GPU is over-committed, the arrays equal the running pods, no
gang runs partly, no bind breaks a queue limit, no pod is bound twice, every pending pod is told why
(tests/property/world.py says how each is computed from scratch).

Pods of every request kind (fraction, gpu-memory, fractions on several GPUs, whole GPUs, CPU only), with
sidecars and long grace periods, gangs (complete and incomplete), arrivals and completions, deletions
(recreated by their controller or not), queue relabels of pending and running pods, pods annotated into
other groups, hostile annotations, nodes deleted and re-registered (some without GPU memory labels: their
GPUNodeReport says it), GPU counts that dip and come back, queue limit edits and deletions, PodGroup edits
(minMember, queue, priority class, preemptibility), PodDisruptionBudgets (deleted anyway, or respected),
and restarts: a fresh scheduler listing the world's objects in some order.

A second test plays the reclaim world (finite quotas the cluster holds, pods of one whole GPU and gangs of
them) and checks KAI's guarantee as an invariant: a queue below its quota whose pod fits gets it within
75 s, whatever the victims' owners do (budgets, grace periods of days, PodGroups made non-preemptible
after they started, pods moved between groups) and across restarts.

CI runs `TESSERA_PROPERTY_EXAMPLES` sequences (default 300, well under a minute); a long run:

    TESSERA_PROPERTY_EXAMPLES=5000 TESSERA_PROPERTY_REPORT=property.json \\
        python -m pytest -q -p no:cacheprovider --timeout=0 tests/property/test_operation_sequences.py

writes the counts (sequences, cycles, operations by kind, binds, limit checks) to `property.json`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st

from tests.property.world import GRACES, LEAVES, MODELS, ORDERS, PRIORITIES, QUEUES, Op, Stats, World

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
priorities = st.sampled_from(PRIORITIES)
submit = st.tuples(
    st.just("submit"),
    requests,
    queue_names,
    priorities,
    st.sampled_from([0, 5, 20, 60]),
    st.sampled_from(GRACES),
    st.booleans(),  # a sidecar
)
gang = st.tuples(st.just("gang"), requests, queue_names, st.integers(2, 3), st.integers(-1, 1))
maybe = st.one_of  # readability: st.none() or a value
group_edit = st.tuples(
    st.just("group_edit"), index, st.integers(1, 4), maybe(st.none(), queue_names), maybe(st.none(), priorities),
    maybe(st.none(), st.sampled_from(["preemptible", "non-preemptible"])),
)  # fmt: skip
regroup = st.tuples(st.just("regroup"), index, st.booleans(), maybe(st.none(), index))
pdb = st.tuples(st.just("pdb"), st.integers(0, 2), maybe(st.none(), st.integers(0, 2)), st.integers(0, 1))
restart = st.tuples(st.just("restart"), st.integers(0, len(ORDERS) - 1))
operation: st.SearchStrategy[Op] = st.one_of(
    submit, submit, submit, gang, gang,  # arrivals weigh more: they are what fills the cluster
    st.tuples(st.just("delete"), index, st.booleans()),
    st.tuples(st.just("relabel"), index, st.booleans(), queue_names),
    st.tuples(st.just("hostile"), index, st.booleans(), index, index),
    st.tuples(st.just("node_delete"), index),
    st.tuples(st.just("node_add"), index, st.one_of(st.none(), st.integers(0, 8))),
    st.tuples(st.just("queue_edit"), st.sampled_from([q for q, _ in QUEUES]), limits),
    st.tuples(st.just("queue_delete"), st.sampled_from([q for q, _ in QUEUES if q != "default"])),
    group_edit, regroup, pdb, restart,
    st.tuples(st.just("tick"), st.integers(1, 40)),
)  # fmt: skip
worlds = st.fixed_dictionaries({
    "nodes": st.lists(st.tuples(st.sampled_from(sorted(MODELS)), st.integers(1, 8)), min_size=1, max_size=4),
    "limits": st.dictionaries(st.sampled_from([q for q, _ in QUEUES]), limits, max_size=3),
    "unlabelled": st.frozensets(st.integers(0, 3)),  # nodes whose GPU memory only their report says
    "budgets": st.sampled_from(["delete", "respect"]),
})  # fmt: skip

# The reclaim world: 8 GPUs, quotas for 6 (world.RECLAIM_QUOTAS), pods of one whole GPU and gangs of them.
leaves = st.sampled_from(LEAVES)
one_gpu = st.just(("whole", "", 1))
reclaim_operation: st.SearchStrategy[Op] = st.one_of(
    *[st.tuples(st.just("submit"), one_gpu, leaves, priorities, st.sampled_from([0, 20, 60]),
                st.sampled_from(GRACES), st.booleans())] * 4,
    st.tuples(st.just("gang"), one_gpu, leaves, st.integers(2, 3), st.integers(-1, 1)),
    st.tuples(st.just("delete"), index, st.booleans()),
    st.tuples(st.just("relabel"), index, st.booleans(), leaves),
    st.tuples(st.just("group_edit"), index, st.integers(1, 3), maybe(st.none(), leaves), maybe(st.none(), priorities),
              maybe(st.none(), st.sampled_from(["preemptible", "non-preemptible"]))),
    regroup, pdb, restart,
    st.tuples(st.just("tick"), st.integers(1, 40)),
)  # fmt: skip
reclaim_worlds = st.fixed_dictionaries({
    "nodes": st.lists(st.tuples(st.sampled_from(sorted(MODELS)), st.just(4)), min_size=2, max_size=2),
    "unlabelled": st.frozensets(st.integers(0, 1)),
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


# Found once the world had restarts, sidecars, budgets and nodes without memory labels (issue 27): each
# failed before the fix named.
FOUND_WITH: list[tuple[list[tuple[str, int]], list[Op], dict[str, Any]]] = [
    # A pod being deleted, seen by a restarted scheduler before its node: held in the plan, not releasing
    # (mirror._account_found).
    ([("A100", 1)], [
        ("submit", ("fraction", "0.1", 1), "default", "train", 0, None, False),
        ("gang", ("fraction", "0.1", 1), "default", 2, 0),
        ("delete", 0, False),
        ("restart", 1),
    ], {}),
    # A running pod whose labels turned unreadable, seen so by a restarted scheduler: its CPU and memory
    # were not accounted on its node (containment.invalid_pod reads what it can).
    ([("A100", 1)], [
        *[("submit", ("fraction", "0.1", 1), "default", "train", 0, None, False)] * 10,
        ("hostile", 0, True, 3, 0),
        ("submit", ("fraction", "0.1", 1), "default", "train", 0, None, False),
        ("gang", ("whole", "", 1), "default", 2, 0),
        ("restart", 0),
    ], {}),
    # The same with a hostile gpu-fraction too: its CPU was dropped with its unreadable GPU request.
    ([("A100", 1)], [
        *[("submit", ("fraction", "0.1", 1), "default", "train", 0, None, False)] * 3,
        ("hostile", 0, True, 0, 0),
        ("gang", ("fraction", "0.1", 1), "default", 2, 0),
        ("delete", 0, False),
        ("gang", ("whole", "", 1), "default", 2, 0),
        ("hostile", 277, True, 3, 0),
        ("submit", ("fraction", "0.1", 1), "default", "train", 0, None, False),
        ("restart", 0),
    ], {}),
    # Whole GPUs held on a node whose memory was assumed from its model (81559 MiB), then measured by its
    # report (81920): the holdings kept the assumed MiB (mirror._size on a memory change).
    ([("A100", 1), ("H100", 3)], [
        ("submit", ("whole", "", 1), "default", "train", 0, None, False),
        ("gang", ("fraction", "0.1", 1), "default", 2, 0),
        ("node_delete", 0),
        ("queue_delete", "org"),
        ("restart", 0),
        ("gang", ("whole", "", 1), "default", 2, 0),
        ("restart", 1),
    ], {"unlabelled": frozenset([0, 1])}),
    # A restart while a node without a memory label counted no GPU, its pods still on GPU 0: the kept GPU
    # had 0 MiB (its memory only in the report, read for counted GPUs only), and kept 0 MiB when the
    # report came after the pods (ClusterState._write_node).
    ([("A100", 1)], [
        *[("submit", ("fraction", "0.1", 1), "default", "train", 0, None, False)] * 7,
        ("gang", ("fraction", "0.1", 1), "default", 2, 0),
        ("node_add", 0, 0),
        ("restart", 0),
    ], {"unlabelled": frozenset([0])}),
    ([("A100", 1)], [
        *[("submit", ("fraction", "0.1", 1), "default", "train", 0, None, False)] * 7,
        ("node_add", 0, 0),
        ("submit", ("fraction", "0.1", 1), "default", "train", 0, None, False),
        ("restart", 1),
    ], {"unlabelled": frozenset([0])}),
    # ... and kept the memory assumed from the model name (81559 MiB) when the report measured 81920.
    ([("H100", 3)], [
        *[("submit", ("fraction", "0.1", 1), "default", "train", 0, None, False)] * 3,
        ("gang", ("fraction", "0.1", 1), "default", 2, 0),
        ("gang", ("fraction", "0.1", 1), "default", 2, 0),
        ("gang", ("whole", "", 1), "default", 2, 0),
        ("node_add", 0, 1),
        ("gang", ("fraction", "0.1", 1), "default", 2, 0),
        ("submit", ("fraction", "0.1", 1), "default", "train", 0, None, False),
        ("restart", 1),
    ], {"unlabelled": frozenset([0])}),
]  # fmt: skip


def _found(test: Callable[..., None]) -> Callable[..., None]:
    for nodes, script, extra in reversed(FOUND_WITH):
        test = example(world={"nodes": nodes, "limits": {}, **extra}, script=script)(test)
    for nodes, script in reversed(FOUND):
        test = example(world={"nodes": nodes, "limits": {}}, script=script)(test)
    return test


# CI draws the same sequences every run (seed 0), so a red CI is a change and not the draw; drawing at
# random (TESSERA_PROPERTY_RANDOM=1) explores.
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
    w = World(world["nodes"], world["limits"], STATS, unlabelled=world.get("unlabelled", frozenset()),
              budgets=world.get("budgets", "delete"))  # fmt: skip
    STATS.sequences += 1
    w.cycle()
    for op in script:
        w.do(op)
        w.cycle()


@_draws
@settings(
    max_examples=max(1, EXAMPLES // 2),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(world=reclaim_worlds, script=st.lists(reclaim_operation, min_size=10, max_size=40))
@example(  # queue b's gangs pipelined first hold the quota a asks for until they are bound (RECLAIM_WITHIN_S)
    world={"nodes": [("A100", 4), ("A100", 4)], "unlabelled": frozenset()},
    script=[
        *[("submit", ("whole", "", 1), "default", "train", 0, None, False)] * 3,
        ("delete", 0, False),
        ("submit", ("whole", "", 1), "default", "train", 0, None, False),
        ("gang", ("whole", "", 1), "b", 2, 0),
        ("delete", 2, False),
        ("gang", ("whole", "", 1), "b", 2, 1),
        *[("submit", ("whole", "", 1), "a", "train", 0, None, False)] * 2,
    ],
)
def test_a_queue_below_its_quota_gets_its_pods(world: dict, script: list[Op]) -> None:
    w = World(world["nodes"], {}, STATS, unlabelled=world["unlabelled"], reclaim=True)
    STATS.sequences += 1
    w.cycle()
    for op in script:
        w.do(op)
        w.cycle()
    for _ in range(50):  # then nothing happens but time: every queue below its quota is served
        w.cycle()


def _play(nodes: list[tuple[str, int]], script: list[Op]) -> World:
    w = World(nodes, {}, STATS)
    w.cycle()
    for op in script:
        w.do(op)
        w.cycle()
    return w


# Pipelined gangs (placed behind pods still terminating, bound once they are gone) were bound by
# `bind_reserved` without asking whether the gang could still run whole: each sequence below ran a gang
# below its minMember.

# A member's labels made a list (unreadable: InvalidRequest) while the gang of two waited: the member left
# the gang (an unreadable pod had no group), its place was dropped alone, and the other one was bound.
GANG_WITH_UNREADABLE_LABELS: list[Op] = [
    ("submit", ("whole", "", 1), "default", "train", 0),
    ("delete", 0, False), ("tick", 1), ("tick", 20),
    ("delete", 0, False), ("delete", 0, False), ("delete", 0, False),
    ("hostile", 0, False, 0, 0),
    ("gang", ("fraction", "0.1", 1), "a", 2, 0),
    ("hostile", 0, False, 3, 0),
]  # fmt: skip


def test_a_gang_whose_members_turn_unreadable_never_runs_below_min_member() -> None:
    w = _play([("A100", 1)], GANG_WITH_UNREADABLE_LABELS)
    pods = w.sim.pods
    assert not pods["ns/g2-1"].obj["spec"].get("nodeName")  # waits with its gang, told why
    assert pods["ns/g2-1"].reason is not None and "ns/g2-0 is invalid" in pods["ns/g2-1"].reason[1], pods[
        "ns/g2-1"
    ].reason
    assert pods["ns/g2-0"].reason is not None and pods["ns/g2-0"].reason[0] == "InvalidRequest"
    assert not w.sched.cache.ledger.reserved  # both places given back


# The PodGroup's minMember raised (2 to 3) while its two members waited for pods to terminate: both were
# bound, a gang of three running two.
GANG_WITH_MIN_MEMBER_RAISED: list[Op] = [
    ("submit", ("fraction", "0.1", 1), "default", "train", 0),
    ("submit", ("whole", "", 1), "default", "train", 0),
    ("delete", 0, False), ("delete", 0, False),
    ("gang", ("whole", "", 1), "default", 2, 0),
    ("group_edit", 0, 3),
    ("tick", 40),
]  # fmt: skip


def test_a_pipelined_gang_whose_min_member_grows_is_not_bound() -> None:
    w = _play([("A100", 3)], GANG_WITH_MIN_MEMBER_RAISED)
    pods = w.sim.pods
    assert not any(pods[k].obj["spec"].get("nodeName") for k in ("ns/g3-0", "ns/g3-1"))
    assert pods["ns/g3-0"].reason is not None and "needs 3" in pods["ns/g3-0"].reason[1]


# The node of one pipelined member deleted while both waited: that member's place was dropped with the
# node, and the other member was bound alone on the node that stayed.
GANG_WITH_A_NODE_DELETED: list[Op] = [
    *[("submit", ("whole", "", 1), "default", "train", 0)] * 2,
    ("delete", 0, False), ("delete", 1, False),
    ("gang", ("whole", "", 1), "default", 2, 0),
    ("node_delete", 1),
    ("tick", 40),
]  # fmt: skip


def test_a_pipelined_gang_that_loses_a_node_is_not_bound_in_part() -> None:
    w = _play([("A100", 1), ("A100", 1)], GANG_WITH_A_NODE_DELETED)
    assert not any(w.sim.pods[k].obj["spec"].get("nodeName") for k in ("ns/g3-0", "ns/g3-1"))
    assert not w.sched.cache.ledger.reserved
