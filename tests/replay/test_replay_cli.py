from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from scheduler.api.cli import new_app
from scheduler.cli.replay import parse_seeds, register
from tests.replay.conftest import pod_row, write_pods


def _app() -> typer.Typer:
    app = new_app()
    register(app)

    @app.command()
    def version() -> None:  # a second command, so `replay` is addressed by name as in `tessera replay`
        typer.echo("0")

    return app


def test_list_policies() -> None:
    result = CliRunner().invoke(_app(), ["replay", "--list-policies"])
    assert result.exit_code == 0
    names = result.stdout.split()
    assert {"random", "dotprod", "packing", "bestfit", "fgd", "fragfit"} <= set(names)


def test_parse_seeds() -> None:
    assert parse_seeds("42-45") == [42, 43, 44, 45]
    assert parse_seeds("42,44, 50-51") == [42, 44, 50, 51]
    assert parse_seeds("3,3,2-3") == [3, 2]
    for bad in ("a", "5-3", "", "4-"):
        with pytest.raises(typer.BadParameter):
            parse_seeds(bad)


def test_json_output_and_plot(trace: tuple[Path, Path], tmp_path: Path) -> None:
    plot = tmp_path / "out.png"
    args = [
        "replay",
        "--nodes",
        str(trace[0]),
        "--pods",
        str(trace[1]),
        "--policy",
        "bestfit",
        "--policy",
        "fgd",
    ]
    args += ["--seeds", "1-2", "--output", "json", "--plot", str(plot)]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [d["policy"] for d in doc] == ["bestfit", "fgd"]
    one = doc[0]
    for key in ("seeds", "capacity_gpus", "pods_attempted", "pods_failed", "elapsed_s", "pods_per_s"):
        assert key in one
    assert one["seeds"] == [1, 2] and one["capacity_gpus"] == 88
    assert len(one["curve"]) == 131 and one["curve"][100]["arrived_pct"] == 100
    assert one["unallocated_pct_at_100"] == pytest.approx(100 - one["curve"][100]["allocated_pct"], abs=1e-3)
    assert one["unallocated_pct_at_100_sd"] >= 0
    assert plot.stat().st_size > 1000 and plot.read_bytes()[:4] == b"\x89PNG"


def test_single_policy_json_is_an_object(trace: tuple[Path, Path]) -> None:
    args = ["replay", "--nodes", str(trace[0]), "--pods", str(trace[1]), "--policy", "random", "--seeds", "5"]
    result = CliRunner().invoke(_app(), [*args, "--output", "json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["policy"] == "random"


def test_bad_files_give_one_line_error_and_nonzero_exit(trace: tuple[Path, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(
        _app(), ["replay", "--nodes", str(tmp_path / "nope.csv"), "--pods", str(trace[1])]
    )
    assert missing.exit_code == 2
    assert "no such file" in missing.output and len(missing.output.strip().splitlines()) == 1
    (tmp_path / "cols.csv").write_text("name,cpu_milli\nx,1\n")
    bad = runner.invoke(_app(), ["replay", "--nodes", str(trace[0]), "--pods", str(tmp_path / "cols.csv")])
    assert bad.exit_code == 2 and "missing column" in bad.output
    unknown = runner.invoke(
        _app(), ["replay", "--nodes", str(trace[0]), "--pods", str(trace[1]), "-p", "nosuch"]
    )
    assert unknown.exit_code == 2 and "unknown policy" in unknown.output


def test_bad_rows_are_reported_and_the_rest_runs(trace: tuple[Path, Path], tmp_path: Path) -> None:
    lines = trace[1].read_text().splitlines()
    pods = write_pods(tmp_path / "pods.csv", [*lines[1:], pod_row("broken", -1, 1, 0, 0)])
    args = [
        "replay",
        "--nodes",
        str(trace[0]),
        "--pods",
        str(pods),
        "-p",
        "random",
        "--seeds",
        "1",
        "--output",
        "json",
    ]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 0
    assert "skipped:" in result.stderr and "cpu_milli" in result.stderr
    assert json.loads(result.stdout)["pods_attempted"] > 0


def test_html_report(trace: tuple[Path, Path], tmp_path: Path) -> None:
    report = tmp_path / "replay.html"
    args = ["replay", "--nodes", str(trace[0]), "--pods", str(trace[1]), "-p", "bestfit", "-p", "fgd", "--seeds", "1-2"]  # fmt: skip
    result = CliRunner().invoke(_app(), [*args, "--output", "json", "--report", str(report)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html and "seeds 1-2" in html
    for entry in doc:  # every policy's headline figure is in the table
        assert entry["policy"] in html and f"{entry['unallocated_pct_at_100']:.2f}" in html
    bad = CliRunner().invoke(_app(), [*args, "--report", str(tmp_path / "missing" / "r.html")])
    assert bad.exit_code != 0 and "cannot write" in bad.output


def test_the_default_trace_comes_from_tessera_trace_dir_or_says_where_to_get_it(
    trace: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a clone with no ../shared beside it
    monkeypatch.delenv("TESSERA_TRACE_DIR", raising=False)
    missing = CliRunner().invoke(_app(), ["replay", "--seeds", "1"])
    assert missing.exit_code == 2 and missing.stderr.count("\n") == 1
    assert "no openb trace" in missing.stderr and "TESSERA_TRACE_DIR" in missing.stderr
    assert "alibaba/clusterdata" in missing.stderr and "--nodes" in missing.stderr
    folder = tmp_path / "openb"
    folder.mkdir()
    (folder / "openb_node_list_gpu_node.csv").write_text(trace[0].read_text())
    (folder / "openb_pod_list_default.csv").write_text(trace[1].read_text())
    monkeypatch.setenv("TESSERA_TRACE_DIR", str(folder))
    found = CliRunner().invoke(_app(), ["replay", "--seeds", "1", "-p", "random", "-o", "json"])
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["capacity_gpus"] == 88


def test_bound_without_highs_fails_before_the_replay(
    trace: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(__import__("sys").modules, "highspy", None)  # `import highspy` raises ImportError
    args = [
        "replay",
        "--nodes",
        str(trace[0]),
        "--pods",
        str(trace[1]),
        "-p",
        "random",
        "--seeds",
        "1",
        "--bound",
    ]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "pip install '.[bound]'" in result.stderr and "random seed" not in result.output  # no replay ran
