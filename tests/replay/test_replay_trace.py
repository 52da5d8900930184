from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.replay.gpu_models import DEFAULT_GPU_MEMORY_MIB
from scheduler.replay.trace import TraceError, load_nodes, load_pods
from tests.replay.conftest import pod_row, write_nodes, write_pods


def test_loads_synthetic_trace(trace: tuple[Path, Path]) -> None:
    nodes, pods = load_nodes(trace[0]), load_pods(trace[1])
    assert len(nodes.rows) == 24 and not nodes.errors
    assert len(pods.rows) == 90 and not pods.errors
    info = nodes.rows[0].node_info()
    assert info.gpu_count == 8 and info.gpu_model == "G2" and info.gpu_memory_mib == 20000


def test_bad_rows_are_reported_with_line_column_value_and_skipped(tmp_path: Path) -> None:
    path = write_pods(
        tmp_path / "pods.csv",
        [
            pod_row("ok-1", 1000, 100, 1, 500),
            pod_row("bad-cpu", -5, 100, 1, 500),
            "bad-int,abc,100,1,500,,LS,Running,0,1,0",
            pod_row("bad-milli", 1000, 100, 1, 1500),
            pod_row("bad-multi-fraction", 1000, 100, 2, 500),
            pod_row("bad-zero-milli", 1000, 100, 1, 0),
            pod_row("ok-1", 1000, 100, 1, 500),  # duplicate name
            pod_row("ok-2", 1000, 100, 0, 0),
        ],
    )
    loaded = load_pods(path)
    assert [p.name for p in loaded.rows] == ["ok-1", "ok-2"]
    got = {(e.line, e.column, e.value) for e in loaded.errors}
    assert got == {
        (3, "cpu_milli", "-5"),
        (4, "cpu_milli", "abc"),
        (5, "gpu_milli", "1500"),
        (6, "gpu_milli", "500"),
        (7, "gpu_milli", "0"),
        (8, "name", "ok-1"),
    }
    assert "pods.csv:4: column cpu_milli='abc'" in str(next(e for e in loaded.errors if e.line == 4))


def test_node_errors_and_unknown_model(tmp_path: Path) -> None:
    path = write_nodes(
        tmp_path / "n.csv", ["a,1000,100,2,", "b,1000,100,2,H999", "c,x,100,1,T4", "d,8000,100,1,T4"]
    )
    loaded = load_nodes(path)
    assert [n.sn for n in loaded.rows] == ["b", "d"]
    assert {(e.line, e.column) for e in loaded.errors} == {(2, "model"), (4, "cpu_milli")}
    assert loaded.warnings and "H999" in loaded.warnings[0]
    assert loaded.rows[0].node_info().gpu_memory_mib == DEFAULT_GPU_MEMORY_MIB


def test_whole_file_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        load_nodes(tmp_path / "missing.csv")
    (tmp_path / "cols.csv").write_text("sn,cpu_milli\nx,1\n")
    with pytest.raises(TraceError, match="missing column"):
        load_nodes(tmp_path / "cols.csv")
    write_pods(tmp_path / "allbad.csv", [pod_row("x", -1, 1, 0, 0)])
    with pytest.raises(TraceError, match="no usable row"):
        load_pods(tmp_path / "allbad.csv")


def test_demand_from_pod_row(tmp_path: Path) -> None:
    path = write_pods(
        tmp_path / "p.csv", [pod_row("f", 3000, 512, 1, 470, "T4|G2"), pod_row("c", 1000, 1, 0, 0)]
    )
    frac, cpu = load_pods(path).rows
    d = frac.demand()
    assert (d.num_gpus, d.gpu_milli, d.models) == (1, 470, frozenset({"T4", "G2"}))
    assert frac.gpu_request_milli == 470
    assert not cpu.demand().uses_gpu and cpu.gpu_request_milli == 0


def test_five_column_multigpu_list_takes_the_simulators_defaults(tmp_path: Path) -> None:
    """The `multigpu*` lists have name,cpu_milli,memory_mib,num_gpu,gpu_milli only: any model."""
    path = tmp_path / "multigpu.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\nm,64000,262144,8,1000\nf,4000,1024,1,470\n")
    loaded = load_pods(path)
    assert not loaded.errors and [p.name for p in loaded.rows] == ["m", "f"]
    whole, frac = (p.demand() for p in loaded.rows)
    assert (whole.num_gpus, whole.gpu_milli, whole.models) == (8, 1000, None)
    assert (frac.gpu_milli, frac.memory_mib, frac.models) == (470, 1024, None)
    assert any("gpu_spec" in w and "any GPU model" in w for w in loaded.warnings)


def test_absent_or_empty_optional_columns_default(tmp_path: Path) -> None:
    """No gpu_milli: whole GPUs; no memory_mib: no memory request; empty cells: the same defaults."""
    path = tmp_path / "min.csv"
    path.write_text("name,cpu_milli,num_gpu\nw,8000,2\nc,1000,0\n")
    loaded = load_pods(path)
    w, c = loaded.rows
    assert (w.gpu_milli, w.memory_mib, w.gpu_request_milli) == (1000, 0, 2000)
    assert (c.gpu_milli, c.gpu_request_milli) == (0, 0)
    assert {w.split(": no ")[1].split(" ")[0] for w in loaded.warnings} == {
        "memory_mib",
        "gpu_milli",
        "gpu_spec",
    }
    empty = write_pods(tmp_path / "empty.csv", ["e,1000,,1,,,LS,Running,0,1,0"])
    (e,) = load_pods(empty).rows
    assert (e.gpu_milli, e.memory_mib, e.gpu_spec) == (1000, 0, "")
    with pytest.raises(TraceError, match="missing column"):
        (tmp_path / "nogpu.csv").write_text("name,cpu_milli\nx,1\n")
        load_pods(tmp_path / "nogpu.csv")


def test_all_node_list_with_cpu_only_nodes(tmp_path: Path) -> None:
    path = write_nodes(tmp_path / "all.csv", ["cpu-0,32000,262144,0,", "gpu-0,96000,393216,8,G2"])
    rows = load_nodes(path).rows
    assert [n.node_info().gpu_count for n in rows] == [0, 8]
    assert rows[0].node_info().gpu_model == ""
