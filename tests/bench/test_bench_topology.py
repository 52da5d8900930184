"""`tessera bench --topology`: nodes labelled into domains, every gang placed inside one domain of the
required level, and the constrained run reported against the unconstrained peer."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from typer.testing import CliRunner

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT, POD_GROUP
from scheduler.bench.cluster import BenchCluster
from scheduler.bench.runner import BenchConfig, run_bench
from scheduler.bench.topology import LABEL_PREFIX, TopologySpec
from scheduler.cli.main import app


def test_spec_labels_nodes_into_nested_domains() -> None:
    spec = TopologySpec.parse("zone:2,rack:3")
    assert (spec.required, spec.preferred, spec.leaves) == ("zone", "rack", 6)
    labels = [spec.labels(i, 12) for i in range(12)]
    racks = [(lb[LABEL_PREFIX + "zone"], lb[LABEL_PREFIX + "rack"]) for lb in labels]
    assert racks[:2] == [("zone-0", "rack-0")] * 2 and racks[-1] == ("zone-1", "rack-2")  # two nodes a rack
    assert len(set(racks)) == 6
    for bad, why in (("zone", "LEVEL:COUNT"), ("zone:0", "LEVEL:COUNT"), ("a:2,a:3", "twice")):
        with pytest.raises(ValueError, match=why):
            TopologySpec.parse(bad)
    with pytest.raises(ValueError, match="not one of the levels"):
        TopologySpec.parse("zone:2,rack:3", required="block")


def test_constrained_gangs_stay_inside_one_rack(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[BenchCluster] = []
    real_init = BenchCluster.__init__

    def keep(self: BenchCluster, *a: object, **kw: object) -> None:
        real_init(self, *a, **kw)  # type: ignore[arg-type]
        seen.append(self)

    monkeypatch.setattr(BenchCluster, "__init__", keep)
    spec = TopologySpec.parse("zone:2,rack:4,nvlink:2")
    cfg = BenchConfig(nodes=32, gpus_per_node=8, init_pods=40, pods=96, gangs=1.0, gang_size=8, batch=48,
                      backend="numpy", topology=spec)  # fmt: skip
    r = run_bench(cfg).to_dict()
    assert r["scheduled"] == 96
    cluster = seen[-1]
    racks: dict[str, set[str]] = defaultdict(set)
    for obj in cluster.pods.values():
        group = obj["metadata"]["annotations"].get(POD_GROUP)
        if group and obj["spec"].get("nodeName"):
            a = GPUAssignment.from_annotation(obj["metadata"]["annotations"][GPU_ASSIGNMENT])
            labels = cluster.nodes[a.node]["metadata"]["labels"]
            racks[group].add(labels[LABEL_PREFIX + "zone"] + "/" + labels[LABEL_PREFIX + "rack"])
    assert len(racks) == 12 and all(len(r) == 1 for r in racks.values())


def test_cli_reports_the_ratio_to_the_unconstrained_peer() -> None:
    args = ["bench", "--nodes", "24", "--init-pods", "20", "--pods", "48", "--gangs", "1", "--gang-size", "8",
            "--topology", "zone:2,rack:3", "--backend", "numpy", "-o", "json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    t = json.loads(result.output)["topology"]
    assert t["levels"] == ["zone:2", "rack:3"] and (t["required"], t["preferred"]) == ("zone", "rack")
    assert t["peer"]["scheduled"] == 48 and t["cost_ratio_cpu"] > 0 and t["cost_ratio_wall"] > 0
    bad = CliRunner().invoke(app, ["bench", "--nodes", "24", "--topology", "rack", "-o", "json"])
    assert bad.exit_code == 2 and "LEVEL:COUNT" in bad.output
