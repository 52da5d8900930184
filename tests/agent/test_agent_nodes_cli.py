import json
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from scheduler.api import GPUNodeReport
from scheduler.cli.main import app as tessera

from .conftest import Scene


def cli() -> typer.Typer:
    return tessera


def sample_reports(scene: Scene) -> list[GPUNodeReport]:
    shared = scene.add_pod("shared", [(0, 500, 0)], namespace="ml")
    hog = scene.add_pod("hog", [(0, 250, 0)], namespace="ml")
    scene.run_process(shared, 0, 4242, 12000)
    scene.run_process(hog, 0, 4343, 15000)
    scene.nvml.set_utilization(0, 87)
    scene.nvml.inject_xid(1, 79)
    first = scene.agent().tick()
    second = first.model_copy(deep=True)
    second.metadata.name = second.spec.node = "gpu-node-2"
    second.spec.gpus = second.spec.gpus[:1]
    second.spec.gpus[0].processes = []
    second.spec.gpus[0].shares = []
    second.spec.gpus[0].assigned_milli = 0
    return [first, second]


def write_json(path: Path, reports: list[GPUNodeReport]) -> Path:
    path.write_text(json.dumps([r.model_dump(by_alias=True, mode="json") for r in reports]))
    return path


def test_table_lists_every_gpu(tmp_path: Path, scene: Scene) -> None:
    path = write_json(tmp_path / "reports.json", sample_reports(scene))
    result = CliRunner().invoke(cli(), ["nodes", "--from-file", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0].split() == ["NODE", "GPU", "MODEL", "MEMORY", "UTIL", "ASSIGNED", "PODS", "HEALTH"]
    rows = [line.split() for line in lines[1:]]
    assert [r[:2] for r in rows] == [["gpu-node-1", "0"], ["gpu-node-1", "1"], ["gpu-node-2", "0"]]
    assert "26.4/40.0 GiB" in lines[1] and "87%" in lines[1] and "0.75" in lines[1]
    assert lines[1].split()[-2:] == ["2", "Healthy"]
    assert "Unhealthy (Xid 79)" in lines[2]


def test_wide_and_json(tmp_path: Path, scene: Scene) -> None:
    reports = sample_reports(scene)
    path = write_json(tmp_path / "reports.json", reports)
    wide = CliRunner().invoke(cli(), ["nodes", "--from-file", str(path), "-o", "wide"])
    assert wide.exit_code == 0
    assert reports[0].spec.gpus[0].uuid in wide.stdout and "ml/hog, ml/shared" in wide.stdout
    out = CliRunner().invoke(cli(), ["nodes", "--from-file", str(path), "-o", "json"])
    assert [GPUNodeReport.model_validate(r) for r in json.loads(out.stdout)] == reports


def test_one_node_with_processes_from_yaml(tmp_path: Path, scene: Scene) -> None:
    reports = sample_reports(scene)
    path = tmp_path / "reports.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [r.model_dump(by_alias=True, mode="json") for r in reports],
            }
        )
    )
    result = CliRunner().invoke(cli(), ["nodes", "gpu-node-1", "--from-file", str(path)])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "4242" in text and "4343" in text and "shared" in text and "main" in text
    assert "over limit" in text  # hog: 15000 MiB against 10240
    assert "gpu-node-2" not in text
    single = CliRunner().invoke(cli(), ["nodes", "gpu-node-2", "--from-file", str(path), "-o", "json"])
    assert json.loads(single.stdout)["metadata"]["name"] == "gpu-node-2"


def test_errors_are_one_line(tmp_path: Path, scene: Scene) -> None:
    path = write_json(tmp_path / "reports.json", sample_reports(scene))
    missing = CliRunner().invoke(cli(), ["nodes", "nope", "--from-file", str(path)])
    # A node or a file that is not there is the user's mistake: exit 2, as the README promises.
    assert missing.exit_code == 2 and "no GPUNodeReport for node 'nope'" in missing.stderr
    unreadable = CliRunner().invoke(cli(), ["nodes", "--from-file", str(tmp_path / "absent.json")])
    assert unreadable.exit_code == 2 and unreadable.stderr.count("\n") == 1
    bad_output = CliRunner().invoke(cli(), ["nodes", "--from-file", str(path), "-o", "xml"])
    assert bad_output.exit_code == 2


def test_bad_report_is_skipped_others_shown(tmp_path: Path, scene: Scene) -> None:
    good = sample_reports(scene)[0].model_dump(by_alias=True, mode="json")
    bad = {
        "apiVersion": "scheduling.tessera.dev/v1alpha1",
        "kind": "GPUNodeReport",
        "metadata": {"name": "broken"},
        "spec": {"node": "broken", "gpus": [{"index": "zero"}]},
    }
    path = tmp_path / "r.json"
    path.write_text(json.dumps([good, bad]))
    result = CliRunner().invoke(cli(), ["nodes", "--from-file", str(path)])
    assert result.exit_code == 0
    assert result.stderr.startswith("warning: skipping report broken: spec.")
    assert "gpu-node-1" in result.stdout and "broken" not in result.stdout


@pytest.mark.parametrize("content", ["[]", '{"kind": "List", "items": []}'])
def test_no_reports(tmp_path: Path, content: str) -> None:
    path = tmp_path / "empty.json"
    path.write_text(content)
    result = CliRunner().invoke(cli(), ["nodes", "--from-file", str(path)])
    assert result.exit_code == 0 and "No GPUNodeReports found" in result.stdout
