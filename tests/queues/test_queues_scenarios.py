"""The example scenarios under examples/scenarios, run as `tessera simulate -f` runs them, with their
measured outcomes asserted."""

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from scheduler.cli.main import app
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.model.reasons import Reason
from scheduler.sim.cluster import SimCluster
from scheduler.sim.loader import load_files
from tests.framework.helpers import assignment, phase
from tests.queues.util import GRACE_S, Recorder, gpus_by_queue

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def scenario(name: str) -> Recorder:
    sim = SimCluster.from_manifests(load_files([SCENARIOS / f"{name}.yaml"]))
    return Recorder(sim, Scheduler(sim, SchedulerConfig(backend="numpy", expected_nodes=16)))


def pending_reason(rec: Recorder, key: str) -> tuple[str, str]:
    reason = rec.sim.pods[key].reason
    assert reason is not None and phase(rec.sim, key) == "Pending"
    return reason


def test_two_teams_sharing():
    rec = scenario("two-teams-sharing")
    rec.run(5)
    assert gpus_by_queue(rec.sim) == {"team-a": 4.0, "team-b": 4.0}
    reason, message = pending_reason(rec, "team-a/a-5")
    assert (
        reason == Reason.QUEUE_AT_FAIR_SHARE
        and "queue team-a is at its fair share (it holds 4 GPUs; fair share 4 GPUs" in message
    )
    assert rec.evictions() == []


def test_burst_and_reclaim():
    rec = scenario("burst-and-reclaim")
    rec.run(59)
    assert gpus_by_queue(rec.sim) == {"team-a": 8.0}  # team-b's idle quota lent to team-a
    rec.run(3)
    assert all(rec.sim.pods[f"team-b/b-{i}"].reason[0] == Reason.PIPELINED for i in range(4))
    rec.run(GRACE_S)  # team-b's pods are bound once the victims have terminated
    assert gpus_by_queue(rec.sim) == {"team-a": 4.0, "team-b": 4.0}
    ev = rec.evictions()
    assert sorted(e["pod"] for e in ev) == [f"team-a/a-{i}" for i in range(4, 8)]  # the youngest four
    assert {e["action"] for e in ev} == {"reclaim"} and all(
        e["beneficiary"].startswith("team-b/") for e in ev
    )
    assert all(ev_t == 60.0 for ev_t in (e["time_s"] for e in ev))  # within the cycle team-b arrived in


def test_priority_preemption():
    rec = scenario("priority-preemption")
    rec.run(32 + GRACE_S)
    ev = rec.evictions()
    assert sorted(e["pod"] for e in ev) == ["research/train-2", "research/train-3"]
    assert {e["action"] for e in ev} == {"preempt"}
    assert phase(rec.sim, "research/build-0") == "Running" and phase(rec.sim, "research/build-1") == "Running"
    assert gpus_by_queue(rec.sim) == {"research": 4.0, "ops": 2.0}


def test_fragmentation_consolidation():
    rec = scenario("fragmentation-consolidation")
    rec.run(105)
    s = rec.sched.cache.state
    assert gpus_by_queue(rec.sim) == {"team-a": 2.0} and s.allocated_milli() == 2000  # 4 halves, 4 GPUs
    rec.run(7 + GRACE_S)
    assert phase(rec.sim, "team-a/big") == "Running"
    moves = rec.evictions("consolidate")
    assert len(moves) == 2 and all(phase(rec.sim, e["pod"]) == "Running" for e in moves)
    assert s.allocated_milli() == 4000  # all 4 GPUs in use
    assert {assignment(rec.sim, e["pod"]).node for e in moves} != {assignment(rec.sim, "team-a/big").node}


def test_gang_that_cannot_fit():
    rec = scenario("gang-cannot-fit")
    rec.run(10)
    assert all(phase(rec.sim, f"team-a/ddp-huge-{i}") == "Pending" for i in range(3))
    assert all(phase(rec.sim, f"team-a/ddp-small-{i}") == "Running" for i in range(2))
    reason, message = pending_reason(rec, "team-a/ddp-huge-0")
    assert reason == Reason.GANG_UNSCHEDULABLE and "even empty, this cluster could hold 2" in message
    status = rec.sim.group_status["team-a/ddp-huge"]
    assert status.phase == "Unschedulable" and status.conditions[0].reason == Reason.GANG_UNSCHEDULABLE
    assert rec.evictions() == []


def test_simulate_cli_runs_a_scenario_and_reports_actions():
    result = CliRunner().invoke(app, ["simulate", "-f", str(SCENARIOS / "burst-and-reclaim.yaml"), "--until", "90s",
                                      "-o", "json", "--backend", "numpy"])  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    evicted = [e for e in summary["events"] if e["type"] == "Evicted"]
    assert len(evicted) == 4 and {e["action"] for e in evicted} == {"reclaim"}
    queues = {q["name"]: q for q in summary["queues"]}
    assert queues["team-a"]["allocated"]["gpu"] == 4 and queues["team-b"]["allocated"]["gpu"] == 4


def test_guaranteed_quota_against_one_big_job():
    rec = scenario("guaranteed-quota-one-big-job")
    rec.run(59)
    assert gpus_by_queue(rec.sim) == {"team-a": 8.0}  # the gang and two singles borrow team-b's quota
    rec.run(2)  # team-b arrives at t=60: its queue is owed 4 GPUs, team-a's excess sits in the gang
    ev = rec.evictions("reclaim")
    assert sorted(e["pod"] for e in ev) == ["team-a/a-0", "team-a/a-1"] + [
        f"team-a/ddp-{i}" for i in range(6)
    ]
    assert rec.gang_evictions == 1 and all(e["time_s"] == 60.0 for e in ev)
    rec.run(GRACE_S + 10)
    assert gpus_by_queue(rec.sim) == {"team-a": 2.0, "team-b": 4.0}  # the quota is back; the singles rerun
    reason, message = pending_reason(rec, "team-a/ddp-0")
    assert reason == Reason.QUEUE_AT_FAIR_SHARE and "gang team-a/ddp needs 6 more pods" in message
    assert "queue team-a would pass its fair share with it (it holds 2 GPUs; fair share 4 GPUs" in message
    rec.run(20)
    assert len(rec.evictions()) == 8  # settled: team-a, below its quota now, takes nothing back


def simulate_json(name: str, until: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["simulate", "-f", str(SCENARIOS / f"{name}.yaml"), "--until", until,
                                      "-o", "json", "--backend", "numpy"])  # fmt: skip
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def test_reclaim_waits_for_the_victims_minimum_runtime():
    rec = scenario("reclaim-min-runtime")
    rec.run(61)  # team-b's pods arrived at t=60: every pod team-a could give up started less than 10m ago
    assert rec.evictions() == [] and gpus_by_queue(rec.sim) == {"team-a": 8.0}
    reason, message = pending_reason(rec, "team-b/b-0")
    assert reason == Reason.WAITING_FOR_MIN_RUNTIME
    # (the Recorder's first cycle is at t=1s: team-a's first pods started then)
    assert "reclaim waits for minimum runtime: first victim eligible in 9m (" in message
    assert "of queue team-a started 1m ago, reclaimMinRuntime 10m; 7 more protected)" in message
    # `tessera simulate` jumps to the moment the first victim may go (no event would wake it before 1h).
    summary = simulate_json("reclaim-min-runtime", "11m")
    evicted = [(e["time_s"], e["pod"], e["action"]) for e in summary["events"] if e["type"] == "Evicted"]
    assert evicted == [(600.0 + i, f"team-a/a-{i}", "reclaim") for i in range(4)]  # the oldest, as they age
    scheduled = {e["pod"]: e["time_s"] for e in summary["events"] if e["type"] == "Scheduled"}
    assert [scheduled[f"team-b/b-{i}"] for i in range(4)] == [630.0, 631.0, 632.0, 633.0]
    queues = {q["name"]: q["allocated"]["gpu"] for q in summary["queues"]}
    assert queues["team-a"] == 4 and queues["team-b"] == 4


def test_preempt_waits_for_the_inherited_minimum_runtime():
    rec = scenario("preempt-min-runtime")
    rec.run(31)
    reason, message = pending_reason(rec, "research/build-0")
    assert reason == Reason.WAITING_FOR_MIN_RUNTIME
    assert message.startswith("preempt waits for minimum runtime: first victim eligible in 4m30s")
    assert "preemptMinRuntime 5m" in message  # set on queue lab, inherited by research
    summary = simulate_json("preempt-min-runtime", "6m")
    evicted = [(e["time_s"], e["pod"], e["action"]) for e in summary["events"] if e["type"] == "Evicted"]
    assert len(evicted) == 1 and evicted[0][0] == 300.0 and evicted[0][2] == "preempt"
    pods = {p["name"]: p["phase"] for p in summary["pods"]}
    assert pods["build-0"] == "Running"


def test_an_elastic_gang_starts_with_what_fits_grows_and_gives_back_members_one_by_one():
    def running(summary: dict[str, Any], prefix: str) -> list[str]:
        return sorted(
            p["name"] for p in summary["pods"] if p["phase"] == "Running" and p["name"].startswith(prefix)
        )

    start = simulate_json("elastic-gang", "1m")
    assert running(start, "ddp-") == [f"ddp-{i}" for i in range(4)]  # minMember 2; the 4 free GPUs
    waiting = next(p for p in start["pods"] if p["name"] == "ddp-4")
    assert "gang team-a/ddp runs its minMember (2); its extra members wait for room" in waiting["reason"]
    grown = simulate_json("elastic-gang", "3m")
    assert len(running(grown, "ddp-")) == 8  # team-b's pods finished at 2m: the gang grew into them
    end = simulate_json("elastic-gang", "6m")
    evicted = [e for e in end["events"] if e["type"] == "Evicted"]
    assert [(e["time_s"], e["action"]) for e in evicted] == [(300.0, "reclaim")] * 3
    assert sorted(e["pod"] for e in evicted) == ["team-a/ddp-5", "team-a/ddp-6", "team-a/ddp-7"]
    assert running(end, "ddp-") == [f"ddp-{i}" for i in range(5)] and len(running(end, "late-")) == 3
    rec = scenario("elastic-gang")
    for _ in range(360):  # cycle by cycle: the gang never runs fewer than its minMember once started
        rec.sim.advance(rec.sim.now_s + 1)
        rec.sched.run_cycle()
        held = sum(1 for i in range(8) if phase(rec.sim, f"team-a/ddp-{i}") == "Running")
        assert held == 0 or held >= 2
    status = rec.sim.group_status["team-a/ddp"]
    assert status.phase == "Running" and status.running == 5
