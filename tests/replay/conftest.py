"""Small synthetic openb-format traces (never the shared trace)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,"
    + "qos,pod_phase,creation_time,deletion_time,scheduled_time"
)


def write_nodes(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join([NODE_HEADER, *rows]) + "\n")
    return path


def write_pods(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join([POD_HEADER, *rows]) + "\n")
    return path


def pod_row(name: str, cpu: int, mem: int, num: int, milli: int, spec: str = "") -> str:
    return f"{name},{cpu},{mem},{num},{milli},{spec},LS,Running,0,100,0"


def synthetic_trace(tmp_path: Path, *, nodes: int = 24, pods: int = 90, seed: int = 7) -> tuple[Path, Path]:
    """A mixed cluster (8-GPU, 2-GPU and 1-GPU nodes of three models) and an openb-like pod mix:
    CPU-only, fractions, one whole GPU, a few multi-GPU pods, some pinned to a model."""
    rng = random.Random(seed)
    kinds = [(96000, 393216, 8, "G2"), (104000, 524288, 2, "T4"), (16000, 65536, 1, "P100")]
    node_rows = [
        f"synth-node-{i:03d},{kinds[i % 3][0]},{kinds[i % 3][1]},{kinds[i % 3][2]},{kinds[i % 3][3]}"
        for i in range(nodes)
    ]
    pod_rows = []
    for i in range(pods):
        r = rng.random()
        if r < 0.12:
            row = pod_row(f"synth-pod-{i:04d}", rng.choice([4000, 8000, 16000]), 8192, 0, 0)
        elif r < 0.5:
            spec = "T4|G2" if rng.random() < 0.2 else ""
            row = pod_row(
                f"synth-pod-{i:04d}",
                rng.choice([2000, 4000, 8000]),
                4096,
                1,
                rng.choice([160, 320, 470, 810]),
                spec,
            )
        elif r < 0.93:
            row = pod_row(f"synth-pod-{i:04d}", rng.choice([4000, 12000]), 16384, 1, 1000)
        else:
            row = pod_row(f"synth-pod-{i:04d}", 16000, 65536, rng.choice([2, 4]), 1000)
        pod_rows.append(row)
    return write_nodes(tmp_path / "nodes.csv", node_rows), write_pods(tmp_path / "pods.csv", pod_rows)


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    return synthetic_trace(tmp_path)
