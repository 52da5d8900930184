"""`tessera replay --all-variants`: every pod list of a folder, table, figure, bound and paper figures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from scheduler.replay.reference import load_reference_table
from scheduler.replay.variants import discover, family
from tests.replay.conftest import synthetic_trace
from tests.replay.test_replay_cli import _app


def _study(tmp_path: Path) -> Path:
    """A folder shaped like cluster-trace-gpu-v2023/csv: node lists and pod lists of three families."""
    d = tmp_path / "csv"
    d.mkdir()
    nodes, pods = synthetic_trace(tmp_path, nodes=12, pods=50)
    shutil.copy(nodes, d / "openb_node_list_gpu_node.csv")
    shutil.copy(nodes, d / "openb_node_list_all_node.csv")
    shutil.copy(pods, d / "openb_pod_list_default.csv")
    (tmp_path / "spec").mkdir()
    _, spec = synthetic_trace(tmp_path / "spec", pods=40, seed=3)
    shutil.copy(spec, d / "openb_pod_list_gpuspec10.csv")
    five = [line.split(",")[:5] for line in pods.read_text().splitlines()]
    (d / "openb_pod_list_multigpu20.csv").write_text("\n".join(",".join(r) for r in five) + "\n")
    return d


def test_discover_orders_families(tmp_path: Path) -> None:
    d = _study(tmp_path)
    names = [p.name for p in discover(d)]
    assert names == [
        "openb_pod_list_default.csv",
        "openb_pod_list_gpuspec10.csv",
        "openb_pod_list_multigpu20.csv",
    ]
    assert [family(p) for p in discover(d)] == ["default", "gpuspec", "multigpu"]


def test_all_variants_writes_json_markdown_and_figure(tmp_path: Path) -> None:
    d = _study(tmp_path)
    ref = tmp_path / "expected.csv"
    bins = ",".join(str(i) for i in range(131))
    row = ",".join("90.0" for _ in range(131))
    ref.write_text(
        f"workload,sc_policy,tune,seed,total_gpus,{bins}\n"
        f"openb_pod_list_gpuspec10,06-FGD,1.3,42,88,{row}\nopenb_pod_list_gpuspec10,06-FGD,1.3,43,88,{row}\n"
    )
    out = tmp_path / "table"
    args = ["replay", "--all-variants", str(d), "-p", "bestfit", "-p", "wastefit", "--seeds", "1-2"]
    result = CliRunner().invoke(_app(), [*args, "--bound", "--out", str(out), "--reference", str(ref)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["policies"] == ["bestfit", "wastefit"] and doc["seeds"] == [1, 2]
    assert [r["workload"] for r in doc["rows"]] == [
        "openb_pod_list_default", "openb_pod_list_gpuspec10", "openb_pod_list_multigpu20",
    ]  # fmt: skip
    for r in doc["rows"]:
        for cell in r["unallocated_pct_at_100"].values():
            assert len(cell["per_seed"]) == 2 and cell["sd"] >= 0
            assert r["bound"]["mean"] <= cell["mean"] + 1e-9  # no policy beats the lower bound
        assert set(r["best"]) <= set(r["best_within_0.1"])
    assert doc["rows"][1]["published"] == {"FGD": 10.0}
    assert any("openb_node_list_all_node.csv" in n for n in doc["node_lists"])
    md = out.with_suffix(".md").read_text()
    table_lines = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(table_lines) == 4 + 4  # header and 3 pod lists; header and 3 families
    assert "| family |" in md and "LP bound" in md and "paper FGD" in md and "**" in md
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_all_variants_errors(tmp_path: Path) -> None:
    bad = CliRunner().invoke(_app(), ["replay", "--all-variants", str(tmp_path / "none")])
    assert bad.exit_code == 2 and "not a directory" in bad.output
    empty = CliRunner().invoke(_app(), ["replay", "--all-variants", str(tmp_path)])
    assert empty.exit_code == 2 and "no openb_pod_list" in empty.output


def test_reference_table_per_workload(tmp_path: Path) -> None:
    ref = tmp_path / "r.csv"
    ref.write_text("workload,sc_policy,100\nw1,06-FGD,95\nw1,06-FGD,93\nw2,05-BestFit,90\n")
    assert load_reference_table(ref) == {"w1": {"FGD": 6.0}, "w2": {"BestFit": 10.0}}
