"""`tessera bench e2e` end to end at a tiny size on the real API server: both schedulers bind every pod, the
report has its keys, and the requests each bind costs are what the API needs (one Binding; for a pod that
waits for Tessera's device plugin, the plugin's one mark). Figures are not judged here: they are
benchmarks."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.bench.e2e.config import E2EConfig
from scheduler.bench.e2e.failover import run_failover_api
from scheduler.bench.e2e.runner import run_compare, run_e2e
from scheduler.bench.e2e.world import APISERVER_ARGS
from scheduler.bench.failover import FailoverConfig
from scheduler.cli.main import app
from scheduler.sandbox import assets
from scheduler.sandbox.controlplane import ControlPlane

pytestmark = pytest.mark.apiserver

KEYS = {"pods_per_s", "latency_p50_s", "latency_p99_s", "api_requests_per_pod", "api_requests", "cpu_s",
        "pods_per_cpu_s", "pods_per_scheduler_cpu_s", "scheduler_memory_mib"}  # fmt: skip


@pytest.fixture(scope="module")
def bench_server() -> Iterator[Path]:
    """A control plane as scheduler_perf runs one (no controller-manager), shared by this module's runs."""
    try:
        folder = assets.require()
    except assets.AssetsMissing as exc:
        pytest.skip(f"real API server: {exc}")
    cp = ControlPlane(folder, Path(tempfile.mkdtemp(prefix="tessera-bench-test-")), controller_manager=False,
                      apiserver_args=APISERVER_ARGS)  # fmt: skip
    cp.start()
    try:
        yield cp.admin_kubeconfig
    finally:
        cp.stop(remove=True)


def test_both_schedulers_bind_every_pod_and_tessera_binds_in_one_request(bench_server: Path) -> None:
    cfg = E2EConfig(
        nodes=3, gpus_per_node=4, pods=10, kubeconfig=str(bench_server), timeout_s=120, stall_s=30
    )
    result = run_compare(cfg)
    runs = {r["scheduler"]: r for r in result["runs"]}
    assert set(runs) == {"tessera", "kube-scheduler"}
    for r in runs.values():
        assert r["bound"] == 10 and set(r) >= KEYS and r["pods_per_s"] > 0
        assert r["api_requests"]["POST pods"] == 1.0 and r["api_requests"]["POST pods/binding"] == 1.0
    assert "PATCH nodes" not in runs["tessera"]["api_requests"]  # no node is written
    assert result["ratio_pods_per_s"] is not None


def test_fractions_cost_a_binding_and_the_plugins_mark_and_are_measured_against_whole_gpus(
    bench_server: Path,
) -> None:
    """8 halves on 3 nodes of 2 GPUs, one waiting for the device plugin per node at a time: each pod costs
    its Binding and the plugin's mark (the stand-in's one PATCH), no node write; the run reports the
    whole-GPU reference it ran first on the same nodes, and the packing of both. The halves end two to a
    GPU (4 GPUs, none half used), as without the hand-off, whatever order the marks arrive in: a half
    queues behind the plugin for a GPU in use rather than start one (Session.fill_first)."""
    cfg = E2EConfig(nodes=3, gpus_per_node=2, pods=8, fraction_share=1.0, kubeconfig=str(bench_server),
                    timeout_s=120, stall_s=30, preload=True)  # fmt: skip
    r = run_e2e(cfg)
    assert r["bound"] == 8
    assert r["api_requests"]["POST pods/binding"] == 1.0 and "PATCH nodes" not in r["api_requests"]
    assert r["client_requests"]["device_plugin_standin"] == 8 and r["api_requests"]["PATCH pods"] == 1.0
    assert r["bind_requests_per_pod"] == 2.0 and r["whole_gpu_run"]["bind_requests_per_pod"] == 1.0
    assert r["packing"]["gpus_used"] == 4 and r["packing"]["gpus_partly_used"] == 0, r["packing"]
    assert r["handoff"]["turns_per_node_max"] >= 2 and r["handoff"]["marked_to_next_bound_p50_s"] > 0
    whole = r["whole_gpu_run"]
    assert whole["bound"] == 6 and whole["packing"]["gpus_used"] == 6  # 8 whole pods, 6 GPUs
    assert r["fraction_to_whole"] == round(r["pods_per_s"] / whole["pods_per_s"], 3)


def test_gangs_through_the_cli(bench_server: Path) -> None:
    args = ["bench", "e2e", "--nodes", "2", "--gpus-per-node", "4", "--pods", "8", "--gang-size", "4",
            "--kubeconfig", str(bench_server), "--timeout", "120", "-o", "json"]  # fmt: skip
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    r = json.loads(out.stdout[out.stdout.index("{") :])
    assert r["bound"] == 8 and r["scheduler"] == "tessera"


def test_the_affinity_workload_is_bound_where_kube_schedulers_filters_allow(bench_server: Path) -> None:
    """Anti-affinity Deployments, zone spread and node affinity by GPU model: Tessera binds them all, and
    kube-scheduler's own filters (the oracle) allow every pod where it was bound."""
    cfg = E2EConfig(nodes=6, gpus_per_node=4, pods=18, affinity=True, kubeconfig=str(bench_server),
                    timeout_s=120, stall_s=30)  # fmt: skip
    r = run_e2e(cfg)
    assert r["bound"] == 18
    if "error" in r["oracle"] and not (
        os.environ.get("CI") or os.environ.get("TESSERA_REQUIRE_CONTROL_PLANE")
    ):
        pytest.skip(f"kube-scheduler oracle: {r['oracle']['error']}")

    assert r["oracle"]["checked"] == 18 and r["oracle"]["feasible"] == 18, r["oracle"]


def test_kube_scheduler_is_refused_fractions() -> None:

    out = CliRunner().invoke(
        app, ["bench", "e2e", "--scheduler", "kube-scheduler", "--fraction-share", "0.5"]
    )
    assert out.exit_code == 2 and "measured for Tessera only" in out.output


def test_failover_the_new_scheduler_binds_the_next_pod_holding_what_the_killed_one_held(
    bench_server: Path,
) -> None:
    r = run_failover_api(FailoverConfig(nodes=3, gpus_per_node=4, pods=30), kubeconfig=str(bench_server),
                         timeout_s=120)  # fmt: skip
    assert r["invariants_hold"], r["findings"]
    assert r["queues"]["default/gpu"] == r["config"]["gpu_pods"] == 10  # 7/8 of the GPUs, rounded down
    assert r["synced_s"] > 0 and r["first_bind_s"] > 0 and r["probe_node"]  # (readyz is polled: either first)
