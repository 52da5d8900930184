"""The topology scenarios under examples/scenarios, run as `tessera simulate -f` runs them, with the
outcomes their header and examples/scenarios/README.md state."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from scheduler.model.reasons import Reason
from tests.framework.helpers import assignment, phase
from tests.queues.test_queues_scenarios import scenario
from tests.queues.util import GRACE_S

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def nodes_of(rec, prefix: str) -> Counter[str]:  # type: ignore[no-untyped-def]
    out: Counter[str] = Counter()
    for key in rec.sim.pods:
        if key.startswith(prefix) and phase(rec.sim, key) == "Running":
            a = assignment(rec.sim, key)
            out[a.node] += 1
    return out


def test_topology_gangs_in_racks() -> None:
    rec = scenario("topology-gangs-in-racks")
    rec.run(35)
    assert nodes_of(rec, "ml/inference") == {"gpu-a1": 4, "gpu-a2": 2}
    assert nodes_of(rec, "ml/ddp-1-") == {"gpu-a3": 4, "gpu-a4": 4}  # rack-a, one NVLink domain (a-2)
    rec.run(30)
    assert nodes_of(rec, "ml/ddp-2-") == {"gpu-b3": 4, "gpu-b4": 4, "gpu-b1": 4}  # rack-b, 2 NVLink domains
    rec.run(30)
    assert nodes_of(rec, "ml/ddp-3-") == {}
    reason = rec.sim.pods["ml/ddp-3-0"].reason
    assert reason is not None and reason[0] == Reason.TOPOLOGY_UNSATISFIED
    assert "inside one rack of topology dc (required level)" in reason[1]
    assert "the most are zone-1/rack-b 4, zone-1/rack-a 2" in reason[1]
    assert rec.evictions() == []


def test_topology_consolidation() -> None:
    rec = scenario("topology-consolidation")
    rec.run(55)
    assert rec.sched.cache.state.allocated_milli() == 12_000  # four singles finished, one per node
    rec.run(5)
    moves = rec.evictions("consolidate")
    assert len(moves) == 1 and moves[0]["time_s"] == 60.0
    assert "to free rack zone-1/rack-a for ml/ddp" in moves[0]["message"]
    pipelined = {e["pod"]: e["node"] for e in rec.events if e["type"] == "Pipelined"}
    assert sorted(pipelined) == ["ml/ddp-0", "ml/ddp-1", "ml/ddp-2"]
    assert set(pipelined.values()) <= {"gpu-a1", "gpu-a2"}  # rack-a, bound once the moved pod is gone
    rec.run(GRACE_S)
    assert nodes_of(rec, "ml/ddp-") == Counter(pipelined.values())
    moved = moves[0]["pod"]
    a = assignment(rec.sim, moved)
    assert phase(rec.sim, moved) == "Running" and a is not None and a.node in ("gpu-b1", "gpu-b2")
    assert rec.sched.cache.state.allocated_milli() == 15_000
    assert rec.gang_evictions == 0


def test_topology_reclaim() -> None:
    rec = scenario("topology-reclaim")
    rec.run(31)
    victims = rec.evictions("reclaim")
    assert len(victims) == 8 and {e["node"] for e in victims} == {"gpu-b1", "gpu-b2"}  # rack-b's 8 pods
    assert all(e["beneficiary"] == "prod/ddp" for e in victims)
    rec.run(GRACE_S)
    assert nodes_of(rec, "prod/ddp-") == {"gpu-b1": 4, "gpu-b2": 4}
    assert nodes_of(rec, "research/") == {"gpu-a1": 4, "gpu-a2": 4}  # research keeps rack-a
    assert rec.evictions() == victims and rec.gang_evictions == 0
