"""`tessera bench` on a tiny cluster: it schedules everything through the real cycle and reports every field."""

import json
import random

import pytest
import typer
from typer.testing import CliRunner

from scheduler.bench.runner import BenchConfig, percentile, run_bench, throughput_windows
from scheduler.bench.workload import make_nodes, make_pods
from scheduler.cli.main import app as tessera

TINY = BenchConfig(nodes=12, gpus_per_node=8, init_pods=20, pods=60, gangs=0.3, batch=25, backend="numpy")


def app() -> typer.Typer:
    return tessera


@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_bench_schedules_all_pods_and_reports_fields(policy):
    r = run_bench(BenchConfig(**{**TINY.__dict__, "policy": policy})).to_dict()
    assert r["backend"] == "numpy"
    assert r["init_scheduled"] == 20
    assert r["scheduled"] + r["unschedulable"] == 60
    # binpack has room for all; spread leaves no node with 8 free GPUs for the big gangs
    assert r["scheduled"] == 60 if policy == "binpack" else r["scheduled"] >= 45
    assert r["cycles"] == 4  # three batches and one more cycle
    assert r["binds"] >= r["scheduled"] and r["evictions"] >= 0  # moved pods bind again
    assert r["pods_per_s"] > 0 and r["elapsed_s"] > 0
    assert set(r["pods_per_s_windows"]) == {"count", "p50", "p90", "p99"}
    assert r["pods_per_s_windows"]["p50"] <= r["pods_per_s_windows"]["p99"]
    assert r["cycle_latency_ms"]["p50"] <= r["cycle_latency_ms"]["p99"]
    split = r["time_split_s"]
    assert set(split) == {"state_update", "scoring", "commit", "other"}
    assert sum(split.values()) == pytest.approx(r["elapsed_s"], rel=0.01, abs=1e-3)
    assert split["scoring"] > 0 and split["commit"] > 0 and split["state_update"] > 0
    assert r["peak_rss_mib"] > 10


def test_bench_runs_on_array_api_strict():
    r = run_bench(BenchConfig(**{**TINY.__dict__, "backend": "strict", "pods": 30})).to_dict()
    assert r["backend"] == "strict" and r["scheduled"] == 30


def test_bench_full_cluster_counts_unschedulable():
    r = run_bench(
        BenchConfig(nodes=2, gpus_per_node=2, init_pods=0, pods=40, gangs=0.0, batch=40, backend="numpy")
    )
    d = r.to_dict()
    assert 0 < d["scheduled"] < 40 and d["unschedulable"] == 40 - d["scheduled"]


def test_cli_bench_json_and_events():
    runner = CliRunner()
    res = runner.invoke(app(), ["bench", "--nodes", "6", "--gpus-per-node", "2", "--init-pods", "4", "--pods", "20",
                                "--batch", "10", "--backend", "numpy", "--output", "json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["config"]["nodes"] == 6 and out["scheduled"] + out["unschedulable"] == 20
    res = runner.invoke(
        app(), ["bench", "events", "--nodes", "5", "--pods", "200", "--backend", "numpy", "-o", "json"]
    )
    assert res.exit_code == 0, res.output
    ev = json.loads(res.output)
    assert ev["pod_events"] == 200 and ev["accounted"] == 200 and ev["errors"] == 0
    assert ev["node_updates"] == 5 and ev["state_apply_s"] >= 0 and ev["cache_apply_s"] > 0
    res = runner.invoke(app(), ["bench", "events", "--nodes", "5", "--pods", "50"])
    assert res.exit_code == 0 and "pod events" in res.output
    # Pods as served (1,200: three pages of the list and a part), decoded by the scheduler's pod watch.
    args = ["bench", "events", "--nodes", "40", "--pods", "1200", "--api-fields", "-o", "json"]
    res = runner.invoke(app(), args)
    assert res.exit_code == 0, res.output
    ev = json.loads(res.output)
    assert ev["config"]["api_fields"] and ev["accounted"] == 1200 and ev["errors"] == 0
    assert ev["watch_decode_cpu_s"] > 0 and ev["rss_after_apply_mib"] > 0
    res = runner.invoke(app(), args[:-2])
    assert res.exit_code == 0 and "pod watch (decode" in res.output and "MiB after" in res.output


def test_cli_rejects_bad_options_in_one_line():
    runner = CliRunner()
    for args, word in ((["bench", "--policy", "nope"], "--policy: 'nope' is not one of"),
                       (["bench", "--backend", "gpu"], "--backend"),
                       (["bench", "-o", "xml"], "--output"),
                       (["bench", "--nodes", "500", "--init-pods", "10000"], "use at most 4,817")):  # fmt: skip
        res = runner.invoke(app(), args)
        assert res.exit_code == 2 and word in res.output and res.output.startswith("error: ")
        assert res.output.count("\n") == 1


def test_workload_follows_the_openb_mix():
    pods = make_pods("p", 4000, gang_fraction=0.1, rng=random.Random(5))
    kinds = {"cpu": 0, "frac": 0, "whole": 0}
    for p in pods.pods:
        limits = p["spec"]["containers"][0]["resources"]["limits"]
        if "gpu-fraction" in p["metadata"]["annotations"]:
            kinds["frac"] += 1
        elif limits:
            kinds["whole"] += 1
        else:
            kinds["cpu"] += 1
    members = sum(1 for p in pods.pods if "tessera.dev/pod-group" in p["metadata"]["annotations"])
    assert len(pods.pods) == 4000 and 0.06 < members / 4000 < 0.14
    assert kinds["frac"] > kinds["cpu"] > 0 and kinds["whole"] > kinds["frac"]
    nodes = make_nodes(8, 4)
    assert len({n["metadata"]["labels"]["nvidia.com/gpu.product"] for n in nodes}) == 2


def test_windows_and_percentiles():
    assert percentile([], 50) == 0.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0 and percentile([1.0, 2.0, 3.0], 99) == 3.0
    # Two cycles of 1 s each (with a client gap between them): 3 binds in the first, 1 in the second.
    cycles = [(10.0, 11.0), (20.0, 21.0)]
    assert throughput_windows([10.1, 10.5, 10.9, 20.2], cycles) == [3.0, 1.0]
    # A short run still gets one (partial) window, scaled to a rate.
    assert throughput_windows([0.1, 0.2], [(0.0, 0.25)]) == [8.0]
