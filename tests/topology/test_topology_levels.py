"""Which levels a constraint tries, innermost first: KAI Scheduler's calculateRelevantDomainLevels
table (`pkg/scheduler/plugins/topology/job_filtering_test.go`), case by case; "root" is the whole
topology. Errors are people's mistakes: the pod is told (InvalidTopology)."""

from __future__ import annotations

import pytest

from scheduler.actions.topology_placement import Scope, resolve
from scheduler.api.topology import Topology, TopologyConstraint
from scheduler.state import ClusterState
from scheduler.state.backend import get_namespace

CASES = [
    ("both required and preferred placement specified", ["datacenter", "zone", "rack"], "zone", "rack",
     ["rack", "zone"]),
    ("only required placement specified", ["datacenter", "zone", "rack"], "zone", None, ["zone"]),
    ("only preferred placement specified", ["datacenter", "zone", "rack"], None, "rack",
     ["rack", "zone", "datacenter", "root"]),
    ("no placement annotations specified", ["zone", "rack"], None, None, "but no required or preferred level"),
    ("required placement not found in topology", ["zone", "rack"], "nonexistent", None,
     "has no level nonexistent (required); its levels: zone, rack"),
    ("preferred placement not found in topology", ["zone", "rack"], None, "nonexistent",
     "has no level nonexistent (preferred)"),
    ("required placement at first level", ["datacenter", "zone", "rack"], "rack", None, ["rack"]),
    ("preferred placement at first level", ["datacenter", "zone", "rack"], None, "rack",
     ["rack", "zone", "datacenter", "root"]),
    ("preferred placement at middle level", ["datacenter", "zone", "rack"], None, "zone",
     ["zone", "datacenter", "root"]),
    ("single level topology with preferred placement", ["zone"], None, "zone", ["zone", "root"]),
    ("complex topology with multiple levels", ["datacenter", "region", "zone", "rack"], "region", "zone",
     ["zone", "region"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "levels", "required", "preferred", "want"), CASES, ids=[c[0] for c in CASES]
)
def test_kai_relevant_domain_levels(
    name: str, levels: list[str], required: str | None, preferred: str | None, want: list[str] | str
) -> None:
    topo = Topology.model_validate(
        {"metadata": {"name": "test-topology"}, "spec": {"levels": [{"nodeLabel": lv} for lv in levels]}}
    )
    state = ClusterState(get_namespace("numpy"))
    state.set_topologies({topo.name: topo.label_keys})
    c = TopologyConstraint(topology="test-topology", required_topology_level=required,
                           preferred_topology_level=preferred)  # fmt: skip
    scope = resolve(state, {topo.name: topo}, c)
    if isinstance(want, str):
        assert isinstance(scope, str) and want in scope
        return
    assert isinstance(scope, Scope)
    assert [levels[i] if i is not None else "root" for i in scope.levels()] == want


def test_levels_are_named_by_label_or_alias() -> None:
    topo = Topology.model_validate({"metadata": {"name": "dc"}, "spec": {"levels": [
        {"nodeLabel": "topology.kubernetes.io/zone", "alias": "zone"}, {"nodeLabel": "example.com/rack"}]}})  # fmt: skip
    state = ClusterState(get_namespace("numpy"))
    state.set_topologies({"dc": topo.label_keys})
    by_alias = resolve(state, {"dc": topo}, TopologyConstraint(topology="dc", required_topology_level="zone"))
    by_label = resolve(state, {"dc": topo}, TopologyConstraint(topology="dc",
                                                                required_topology_level="topology.kubernetes.io/zone"))  # fmt: skip
    assert isinstance(by_alias, Scope) and by_alias == by_label and by_alias.required == 0
