"""KAI Scheduler's topology allocation tables, ported: each case keeps KAI's name and expectations
(`pkg/scheduler/actions/allocate/allocateTopology_test.go` and
`pkg/scheduler/actions/integration_tests/allocate/allocate_topology_test.go`). Sub-group cases are left
out: Tessera's PodGroup has no sub-groups. Running pods are KAI's `running_job*`, pinned to their node;
the gang is KAI's `pending_job0` (one whole GPU per pod unless the case says otherwise)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from scheduler.model.reasons import Reason
from tests.topology.util import Gang, gpu_node, topology, world

RACK, SPINE, ZONE, REGION = "k8s.io/rack", "k8s.io/spine", "k8s.io/zone", "k8s.io/region"
TZONE, TRACK, TREGION = (
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/rack",
    "topology.kubernetes.io/region",
)


@dataclass
class Case:
    name: str
    levels: tuple[str, ...]
    nodes: list[tuple[int, dict[str, str]]]  # node<i>: (GPUs, labels)
    gang: Gang
    running: list[tuple[str, int]] = field(default_factory=list)  # (node, GPUs) of each running pod
    expect: dict[int, str] | None = None  # pod index -> node; None: the gang stays pending
    expect_nodes: set[str] | None = None  # the gang runs, on these nodes (any order)
    message: tuple[str, ...] = ()  # pending: the reason's message contains these
    cpu: dict[int, str] = field(default_factory=dict)  # node index -> CPU cores


def racks(*names: str) -> list[dict[str, str]]:
    return [{RACK: n} for n in names]


CASES = [
    # ---- allocateTopology_test.go
    Case(
        "Required topology level - schedule all tasks on the same rack",
        (RACK,),
        [(1, lb) for lb in racks("rack1", "rack1", "rack2", "rack2")],
        Gang(required=RACK),
        running=[("node0", 1)],
        expect={0: "node2", 1: "node3"},
    ),
    Case(
        "Required topology level - could not schedule on first domain due to affinity, goes to next",
        (RACK,),
        [
            (1, {RACK: "rack1"}),
            (1, {RACK: "rack1"}),
            (1, {RACK: "rack2", "affinity": "affinity1"}),
            (1, {RACK: "rack2", "affinity": "affinity1"}),
        ],
        Gang(required=RACK, selectors={0: {"affinity": "affinity1"}}),
        expect={0: "node2", 1: "node3"},
    ),
    Case(
        "Required topology with multiple levels - schedule all tasks on the same spine",
        (RACK, SPINE),
        [(2, {RACK: "rack1", SPINE: "spine1"}), (2, {RACK: "rack1", SPINE: "spine2"})],
        Gang(required=SPINE),
        running=[("node0", 1)],
        expect={0: "node1", 1: "node1"},
    ),
    Case(
        "Required topology with multiple levels - schedule all tasks on the same rack",
        (RACK, SPINE),
        [
            (2, {RACK: "rack1", SPINE: "spine1"}),
            (2, {RACK: "rack1", SPINE: "spine2"}),
            (2, {RACK: "rack2", SPINE: "spine1"}),
            (2, {RACK: "rack2", SPINE: "spine2"}),
        ],
        Gang(pods=4, required=RACK),
        running=[("node0", 1)],
        expect={0: "node2", 1: "node2", 2: "node3", 3: "node3"},
    ),
    Case(
        "Required topology with multiple levels - schedule all tasks on the same partially occupied rack",
        (RACK, SPINE),
        [(2, {RACK: "rack1", SPINE: "spine1"}), (2, {RACK: "rack1", SPINE: "spine2"})],
        Gang(required=RACK),
        running=[("node0", 1)],
        expect={0: "node0", 1: "node1"},
    ),
    Case(
        "Required topology with multiple levels - job remains pending as no available rack can be found",
        (RACK, SPINE),
        [
            (2, {RACK: "rack1", SPINE: "spine1"}),
            (2, {RACK: "rack1", SPINE: "spine2"}),
            (2, {RACK: "rack2", SPINE: "spine1"}),
            (2, {RACK: "rack2", SPINE: "spine2"}),
        ],
        Gang(pods=4, required=RACK),
        running=[("node0", 1), ("node2", 1)],
        message=("inside one k8s.io/rack", "rack1 3", "rack2 3"),
    ),
    Case(
        "Preferred topology - schedule job on the same rack",
        (RACK,),
        [(2, {RACK: "rack1"}), (2, {RACK: "rack2"})],
        Gang(preferred=RACK),
        running=[("node0", 1)],
        expect={0: "node1", 1: "node1"},
    ),
    Case(
        "Preferred topology - schedule job even if preferred constraint can't be met",
        (RACK,),
        [(2, {RACK: "rack1"}), (2, {RACK: "rack2"})],
        Gang(preferred=RACK),
        running=[("node0", 1), ("node1", 1)],
        expect={0: "node1", 1: "node0"},
    ),
    Case(
        "Combined preferred and required topology constraints - schedule job although preferred constraint "
        "cannot be satisfied",
        (RACK, SPINE),
        [
            (2, {RACK: "rack1", SPINE: "spine1"}),
            (2, {RACK: "rack1", SPINE: "spine2"}),
            (2, {RACK: "rack2", SPINE: "spine1"}),
            (2, {RACK: "rack2", SPINE: "spine2"}),
        ],
        Gang(required=RACK, preferred=SPINE),
        running=[("node0", 1), ("node0", 1), ("node1", 1), ("node2", 1), ("node3", 1)],
        expect={0: "node3", 1: "node2"},
    ),
    Case(
        "Required topology constraint - prefer packed domain",
        (RACK,),
        [(10, {RACK: "rack1"}), (10, {RACK: "rack2"})],
        Gang(required=RACK),
        running=[("node1", 1)],
        expect={0: "node1", 1: "node1"},
    ),
    Case(
        "Combined preferred and required topology constraints - preferred level respected when possible",
        (RACK, SPINE),
        [(1, {RACK: "rack1", SPINE: f"spine{1 + i // 2}"}) for i in range(8)],
        Gang(pods=3, required=RACK, preferred=SPINE),
        expect={0: "node6", 1: "node7", 2: "node4"},
    ),
    Case(
        "Bin Packing - allocate on domain with least free resources (most occupied)",
        (ZONE, SPINE, RACK),
        [(1, {ZONE: "zone1", SPINE: f"spine{1 + i // 4}", RACK: f"rack{1 + i // 2}"}) for i in range(8)],
        Gang(pods=1, preferred=SPINE),
        running=[("node0", 1), ("node1", 1), ("node2", 1)],
        expect={0: "node3"},
    ),
    Case(
        "Bin Packing - Pack Top-Most domain first",
        (ZONE, SPINE, RACK),
        [
            (1, {ZONE: "zone1", SPINE: "spine1", RACK: "rack1"}),
            (1, {ZONE: "zone1", SPINE: "spine1", RACK: "rack2"}),
            (1, {ZONE: "zone1", SPINE: "spine1", RACK: "rack3"}),
            (1, {ZONE: "zone1", SPINE: "spine2", RACK: "rack4"}),
            (1, {ZONE: "zone1", SPINE: "spine2", RACK: "rack4"}),
        ],
        Gang(pods=1, preferred=RACK),
        expect={0: "node3"},
    ),
    # ---- integration_tests/allocate/allocate_topology_test.go
    Case(
        "Multi-level topology - pack job in single rack with preferred level",
        (TZONE, TRACK),
        [
            (2, {TZONE: "zone1", TRACK: "rack1"}),
            (2, {TZONE: "zone1", TRACK: "rack2"}),
            (2, {TZONE: "zone2", TRACK: "rack3"}),
        ],
        Gang(pods=3, required=TZONE, preferred=TRACK),
        expect_nodes={"node0", "node1"},
    ),
    Case(
        "Topology packing - prefer domains with existing allocations",
        (TRACK,),
        [(3, {TRACK: "rack1"}), (3, {TRACK: "rack2"})],
        Gang(required=TRACK),
        running=[("node0", 1)],
        expect={0: "node0", 1: "node0"},
    ),
    Case(
        "Topology constraint - job cannot fit in single domain, stays pending",
        (TRACK,),
        [(1, {TRACK: "rack1"}), (1, {TRACK: "rack1"}), (2, {TRACK: "rack2"})],
        Gang(gpus=2, required=TRACK),
        message=("inside one topology.kubernetes.io/rack", "rack2 1"),
    ),
    Case(
        "Three-level topology - allocate with required and preferred constraints",
        (TREGION, TZONE, TRACK),
        [
            (2, {TREGION: "us-west", TZONE: "us-west-1a", TRACK: "rack1"}),
            (2, {TREGION: "us-west", TZONE: "us-west-1a", TRACK: "rack2"}),
            (2, {TREGION: "us-west", TZONE: "us-west-1b", TRACK: "rack3"}),
            (2, {TREGION: "us-east", TZONE: "us-east-1a", TRACK: "rack4"}),
        ],
        Gang(pods=4, required=TREGION, preferred=TRACK),
        expect_nodes={"node0", "node1"},
    ),
    Case(
        "Topology with partial allocation - one rack full, allocate remaining in another",
        (TRACK,),
        [(1, {TRACK: "rack1"}), (1, {TRACK: "rack1"}), (2, {TRACK: "rack2"})],
        Gang(required=TRACK),
        running=[("node0", 1), ("node1", 1)],
        expect={0: "node2", 1: "node2"},
    ),
    Case(
        "Preferred topology only - still allocates when preferred level cannot be satisfied",
        (TRACK,),
        [(2, {TRACK: "rack1"}), (2, {TRACK: "rack2"})],
        Gang(preferred=TRACK),
        running=[("node0", 1), ("node1", 1)],
        expect_nodes={"node0", "node1"},
    ),
    Case(
        "Topology with CPU constraints - allocate within topology domain respecting CPU limits",
        (TRACK,),
        [(2, {TRACK: "rack1"}), (2, {TRACK: "rack2"})],
        Gang(required=TRACK, cpu="2"),
        cpu={0: "5", 1: "1"},
        expect={0: "node0", 1: "node0"},
    ),
    Case(
        "Topology constraint failure - sufficient cluster resources but fragmented across domains",
        (TRACK,),
        [(2, {TRACK: f"rack{i + 1}"}) for i in range(4)],
        Gang(pods=4, required=TRACK),
        message=("none can hold them now", "rack1 2", "rack2 2", "rack3 2", "rack4 2"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kai_topology_allocation(case: Case) -> None:
    nodes = [
        gpu_node(f"node{i}", gpus, labels, cpu=case.cpu.get(i, "64"))
        for i, (gpus, labels) in enumerate(case.nodes)
    ]
    running = [(f"running-{i}", node, gpus) for i, (node, gpus) in enumerate(case.running)]
    w = world([topology("cluster-topology", *case.levels)], nodes, case.gang, running=running)
    for i, (node, _) in enumerate(case.running):
        assert w.sim.pods[f"queue0/running-{i}"].obj["spec"]["nodeName"] == node
    got = w.placement()
    if case.expect is not None:
        assert got == case.expect
    elif case.expect_nodes is not None:
        assert None not in got.values() and set(got.values()) == case.expect_nodes
    else:
        assert set(got.values()) == {None}, f"the gang must stay pending whole, got {got}"
        reason = w.reason()
        assert reason is not None and reason[0] == Reason.TOPOLOGY_UNSATISFIED
        for text in case.message:
            assert text in reason[1], reason[1]


def test_every_case_decides_the_same_on_array_api_strict() -> None:
    """The kernels and the placement loop only use the array API: array-api-strict decides alike."""
    for case in CASES:
        nodes = [
            gpu_node(f"node{i}", gpus, labels, cpu=case.cpu.get(i, "64"))
            for i, (gpus, labels) in enumerate(case.nodes)
        ]
        running = [(f"running-{i}", node, gpus) for i, (node, gpus) in enumerate(case.running)]
        topologies = [topology("cluster-topology", *case.levels)]
        strict = world(topologies, nodes, case.gang, running=running, backend="strict")
        plain = world(topologies, nodes, case.gang, running=running, backend="numpy")
        assert (strict.placement(), strict.reason()) == (plain.placement(), plain.reason()), case.name
