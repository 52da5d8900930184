"""The ledger's primitive moves arrays, holdings and listeners together, and undoes them together."""

from __future__ import annotations

import pytest

from scheduler.cache.error_log import ErrorLog
from scheduler.cache.job_index import QueueUsage
from scheduler.cache.ledger import Holding, Ledger, Owner
from scheduler.cache.reservations import Reservation
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.framework.session import Session
from scheduler.model.reasons import Reason
from scheduler.model.types import GPUShare, NodeInfo, Placement
from scheduler.state import ClusterState, OvercommitError, PodDemand, demand_for
from scheduler.state.backend import get_namespace
from tests.framework.helpers import A100, cluster, node, pod


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[Holding | None, Holding | None]] = []

    def changed(self, old: Holding | None, new: Holding | None) -> None:
        self.seen.append((old, new))

    def arrived(self, holdings: list[Holding]) -> None:
        self.seen.extend((None, h) for h in holdings)


def ledger() -> Ledger:
    state = ClusterState(get_namespace("numpy"), max_gpus=2, capacity=2)
    for i in range(2):
        state.add_node(NodeInfo(f"n{i}", 8000, 16384, 2, "A", 16384))
    return Ledger(state)


def half(row: int, slot: int) -> Placement:
    return Placement(row, (GPUShare(slot, 500, 8192),), 1000, 1024)


def free(led: Ledger) -> list[list[int]]:
    return led.state.host(led.state.free_milli).tolist()


def test_one_swap_moves_arrays_holdings_and_listeners() -> None:
    led, usage, rec = ledger(), QueueUsage(), Recorder()
    led.add_listener(usage)
    led.add_listener(rec)
    a = Owner("q", "pod:ns/a")
    led.hold("a", half(0, 1), a)
    assert free(led)[0] == [1000, 500] and led.placement("a") == half(0, 1)
    assert usage.by_queue() == {"q": (500, 1000, 1024)} and rec.seen[-1][0] is None
    led.reown("a", Owner("r", "pod:ns/a", nonpreemptible=True))  # same place: arrays untouched
    assert free(led)[0] == [1000, 500]
    assert usage.by_queue() == {"r": (500, 1000, 1024)} == usage.by_queue(nonpreemptible=True)
    led.release("a")
    assert free(led)[0] == [1000, 1000] and "a" not in led and usage.by_queue() == {}


def test_rollback_undoes_everything_newest_first() -> None:
    led, usage = ledger(), QueueUsage()
    led.add_listener(usage)
    led.hold("a", half(0, 0), Owner("q", "j"))
    before = (dict(led.pods), free(led), usage.by_queue())
    cp = led.begin()
    led.release("a")
    led.hold("b", half(0, 0), Owner("q", "k"))
    led.hold("c", half(0, 0), Owner("r", "l"))  # 1000 milli on (0, 0): b and c together
    led.reserve(Reservation("ns/a", "ns", "q", PodDemand(), half(1, 1), "k", 9.0))
    assert free(led) == [[0, 1000], [1000, 500]]
    led.rollback(cp)
    led.commit()
    assert (dict(led.pods), free(led), usage.by_queue()) == before and led.reserved == {}


def test_a_hold_that_does_not_fit_changes_nothing() -> None:
    led, rec = ledger(), Recorder()
    led.add_listener(rec)
    led.hold("a", Placement(0, (GPUShare(0, 800, 1),), 0, 0))
    with pytest.raises(OvercommitError):
        led.hold("b", Placement(0, (GPUShare(0, 300, 1),), 0, 0))
    with pytest.raises(OvercommitError):  # a relist is all or nothing
        led.hold_many({"c": half(1, 0), "d": Placement(0, (GPUShare(0, 300, 1),), 0, 0)})
    assert set(led.pods) == {"a"} and len(rec.seen) == 1 and free(led) == [[200, 1000], [1000, 1000]]


def test_a_node_gone_drops_its_holdings_without_touching_other_rows() -> None:
    led, usage = ledger(), QueueUsage()
    led.add_listener(usage)
    led.hold_many({"a": half(0, 0), "b": half(1, 0)})
    led.reown("a", Owner("q", "j"))
    led.reown("b", Owner("q", "k"))
    led.reserve(Reservation("ns/x", "ns", "q", PodDemand(), half(0, 1), "k", 9.0))
    assert led.forget_row(0) == ["a"]
    assert set(led.pods) == {"b"} and led.reserved == {} and usage.by_queue() == {"q": (500, 1000, 1024)}


def test_error_log_keeps_the_latest_and_counts_all() -> None:
    log = ErrorLog(keep=3)
    for i in range(5):
        log.add(f"e{i}")
    assert log.latest() == ["e2", "e3", "e4"] and log.latest(1) == ["e4"] and log.total == 5


def test_an_unknown_action_is_an_error() -> None:
    sim, _ = cluster([node("n0", A100, 1, 8, 64)])
    with pytest.raises(ValueError, match=r"unknown action.*'bogus'"):
        Scheduler(sim, SchedulerConfig(actions=("allocate", "bogus")))


def test_every_reason_has_a_kind_a_meaning_and_a_row_in_the_queue_guide() -> None:
    from pathlib import Path

    from scheduler.model.reasons import Reason

    guide = (Path(__file__).parents[2] / "docs" / "queues.md").read_text()
    for reason in Reason:
        assert reason.wait and reason.meaning
        assert f"| `{reason.value}` |" in guide, f"docs/queues.md does not explain {reason.value}"


def pod_obj(name: str) -> dict:
    return pod(name, "default", arrival_s=0, duration_s=100, gpus=1, cpu="1")


def test_a_failing_action_leaves_no_half_transaction() -> None:
    from scheduler.framework.transaction import Transaction

    objs = [node("n0", A100, 2, 8, 64), pod_obj("p0"), pod_obj("p1")]
    sim, sched = cluster(objs)

    class Breaks:
        name = "breaks"

        def execute(self, session: Session, cluster: object) -> None:
            tx = Transaction(session, "breaks")
            job = session.pending_jobs[0]
            first = session.facts(job).pending[0]
            tx.place(first, job, session.place(demand_for(first)))
            raise RuntimeError("boom")

    sched.actions = [Breaks()]
    sim.advance(1.0)
    result = (
        sched.run_cycle()
    )  # contained: each job it failed on is quarantined (tests/framework/test_isolation.py)
    assert sched.cache.ledger.pods == {} and sched.cache.state.allocated_milli() == 0
    assert {why.reason for why in result.reasons.values()} == {Reason.INVALID_REQUEST}
    assert all("boom" in why.message for why in result.reasons.values())


def test_holding_many_at_once_tells_the_listeners_and_the_journal_what_holding_each_does() -> None:
    one, many = ledger(), ledger()
    seen_one, seen_many = Recorder(), Recorder()
    one.add_listener(seen_one)
    many.add_listener(seen_many)
    items = [("a", half(0, 0)), ("b", half(1, 0)), ("c", half(0, 1))]
    for uid, pl in items:
        one.hold(uid, pl)
    cp = many.begin()
    many.hold_many(dict(items))
    assert many.pods == one.pods and free(many) == free(one) and seen_many.seen == seen_one.seen
    assert many.changes == one.changes
    many.rollback(cp)  # journalled like the holds one by one
    many.commit()
    assert many.pods == {} and free(many) == [[1000, 1000], [1000, 1000]]
    many.hold("a", half(0, 0))
    many.hold_many({"a": half(1, 1), "b": half(0, 1)})  # one held already: it moves, as `hold` moves it
    assert many.pods["a"].placement == half(1, 1) and many.pods["b"].placement == half(0, 1)
    assert free(many) == [[1000, 500], [1000, 500]]
