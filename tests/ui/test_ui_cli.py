"""`tessera simulate --report`: the same dashboard, with the allocation-over-time chart, as one file."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from scheduler.cli.main import app


def test_simulate_writes_a_self_contained_report(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["simulate", "--until", "30s", "--report", str(out), "-o", "json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    html = out.read_text()
    assert 'id="timeline"' in html and "<polyline" in html
    assert f"{summary['gpus']['capacity']} GPUs" in html
    for pod in summary["pods"]:
        if pod["phase"] == "Running" and pod["gpus"]:
            assert f'data-pod="{pod["namespace"]}/{pod["name"]}"' in html
    assert "<script src" not in html and '<link rel="stylesheet"' not in html


def test_unwritable_report_is_a_clear_error(tmp_path: Path) -> None:
    out = tmp_path / "missing-dir" / "report.html"
    result = CliRunner().invoke(app, ["simulate", "--until", "2s", "--report", str(out)])
    assert result.exit_code == 2
    assert "--report: cannot write" in result.output and not out.exists()
