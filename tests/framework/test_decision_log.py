"""Every decision the cycle carries out is one structured line at INFO in the scheduler's log (logger
`scheduler.decisions`): binds with node and GPUs, evictions with the action and the pod they make room for,
placements pipelined behind victims. `tessera-scheduler` logs INFO by default."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.sim.cluster import SimCluster
from scheduler.sim.loader import load_files
from scheduler.sim.runner import run_simulation

ROOT = Path(__file__).resolve().parents[2]


def fields(line: str) -> dict[str, str]:
    import shlex

    return dict(part.split("=", 1) for part in shlex.split(line))


def test_binds_and_evictions_are_logged_as_decision_lines(caplog: pytest.LogCaptureFixture) -> None:
    sim = SimCluster.from_manifests(load_files([ROOT / "examples/scenarios/priority-preemption.yaml"]))
    scheduler = Scheduler(sim, SchedulerConfig(policy="binpack"))
    with caplog.at_level(logging.INFO, logger="scheduler.decisions"):
        run_simulation(sim, scheduler, until_s=60)
    lines = [fields(r.getMessage()) for r in caplog.records if r.name == "scheduler.decisions"]
    scheduled = [f for f in lines if f["decision"] == "Scheduled"]
    evicted = [f for f in lines if f["decision"] == "Evicted"]
    assert scheduled and all(f["node"] and f["queue"] and f["action"] for f in scheduled)
    assert all(":" in f["gpus"] for f in scheduled if f.get("gpus"))  # index:milli per GPU
    assert len(evicted) == 2 and {f["action"] for f in evicted} == {"preempt"}
    assert all(f["beneficiary"] and f["message"] for f in evicted)
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "scheduler.decisions")
