"""`tessera bench allocate` (scheduler/bench/allocate.py): the device plugin's Allocate latency through its
real gRPC socket and its real pod watch, on the real API server."""

from __future__ import annotations

import time

import pytest

from scheduler.bench.allocate import run_allocate_bench
from tests.controlplane.scene import Scene

pytestmark = pytest.mark.apiserver


def test_bench_allocates_every_pod_on_its_gpu(scene: Scene) -> None:
    scene.track("nodes", "bench")
    started = time.monotonic()
    result = run_allocate_bench(pods=20, gpu_spec="2xA100-80GB", kubeconfig=str(scene.cp.admin_kubeconfig),
                                node_name="bench", namespace=scene.ns)  # fmt: skip
    assert result["pods_on_node"] == 20 and result["fraction_per_pod"] == 0.1
    stats = result["allocate_ms"]
    assert 0 < stats["p50"] <= stats["p99"] <= stats["max"]
    assert len([p for p in scene.pods() if p["metadata"]["name"].startswith("bench-")]) == 20
    assert time.monotonic() - started < 30
