"""`tessera bench failover` in memory, and the restart invariants it checks: a new scheduler holds what the
old one held (per queue and per GPU) plus the pod created after the kill, and no GPU is over-committed.
The same run through the real API server is in `test_bench_e2e.py`. Figures are not judged here."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from scheduler.bench.failover import (
    PROBE_QUEUE,
    PROBE_REQUEST,
    FailoverConfig,
    restart_findings,
    run_failover_in_memory,
)
from scheduler.cli.main import app

BEFORE = {(PROBE_QUEUE, "gpu"): 10.0, (PROBE_QUEUE, "cpu"): 20_000.0, ("team", "gpu"): 2.0}
GPUS = {("n1", 0): 1000, ("n1", 1): 500}
PROBE_GPU = {("n1", 1): 100}


def _after(**change: float) -> dict[tuple[str, str], float]:
    out = {k: v + (PROBE_REQUEST.get(k[1], 0.0) if k[0] == PROBE_QUEUE else 0.0) for k, v in BEFORE.items()}
    out[(PROBE_QUEUE, "memory")] = PROBE_REQUEST["memory"]
    for key, delta in change.items():
        queue, resource = key.split("__")
        out[(queue, resource)] += delta
    return out


def test_the_same_holdings_plus_the_new_pod_pass() -> None:
    assert restart_findings(BEFORE, _after(), PROBE_REQUEST, GPUS, {("n1", 0): 1000, ("n1", 1): 600},
                            PROBE_GPU) == []  # fmt: skip


def test_a_queue_charged_less_after_the_restart_is_found() -> None:
    found = restart_findings(BEFORE, _after(team__gpu=-1.0), PROBE_REQUEST, GPUS,
                             {("n1", 0): 1000, ("n1", 1): 600}, PROBE_GPU)  # fmt: skip
    assert found == ["queue team gpu: 1 held after the restart, 2 expected"]


def test_an_over_committed_or_forgotten_gpu_is_found() -> None:
    found = restart_findings(
        BEFORE, _after(), PROBE_REQUEST, GPUS, {("n1", 0): 1100, ("n1", 1): 600}, PROBE_GPU
    )
    assert any("over-committed" in f for f in found) and any("other shares" in f for f in found)
    forgotten = restart_findings(BEFORE, _after(), PROBE_REQUEST, GPUS, {("n1", 1): 600}, PROBE_GPU)
    assert forgotten == ["1 GPUs hold other shares than before the restart, first n1/0: 1000 -> 0 milli"]


def test_in_memory_a_new_scheduler_holds_every_running_pod_and_binds_the_next() -> None:
    r = run_failover_in_memory(FailoverConfig(nodes=20, pods=600))
    assert r["invariants_hold"], r["findings"]
    assert r["accounted"] == r["running_pods"] == 600
    assert 0 < r["synced_s"] <= r["first_bind_s"]


def test_the_command_prints_json_and_exits_0_when_the_invariants_hold() -> None:
    res = CliRunner().invoke(app, ["bench", "failover", "--in-memory", "--nodes", "10", "--pods", "200",
                                   "-o", "json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["path"] == "in-memory"
