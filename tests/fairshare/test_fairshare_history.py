"""The usage history kept between scheduler runs: saved and read back through the store's JSON, never
written before it was read, kept within a ConfigMap's size, and a store that holds something else."""

from __future__ import annotations

import pytest

from scheduler.api.usage import UsageHistoryRecord
from scheduler.model.resources import Resources
from scheduler.queues.usage_history import MAX_RECORD_BYTES, TimeBasedFairShare, UsageHistory, UsageParams
from scheduler.queues.usage_store import MemoryUsageStore, UsageStoreError, dump_record

HOUR = 3600.0
P = UsageParams(window_s=24 * HOUR, half_life_s=6 * HOUR, resolution_s=HOUR, persist_s=600)


def busy(history: UsageHistory | TimeBasedFairShare, until_h: float, step_h: float = 0.5) -> None:
    t = 0.0
    while t <= until_h * HOUR:
        held = {"a": Resources(gpu=6, cpu=12000, memory=4096), "b": Resources(gpu=2 if t < 5 * HOUR else 0)}
        cap = Resources(gpu=8, cpu=64000, memory=65536)
        if isinstance(history, UsageHistory):
            history.record(t, held, cap)
        else:
            history.shares(t)
            history.observe(t, held, cap)
        t += step_h * HOUR


def test_a_saved_history_reads_back_the_same_usage() -> None:
    h = UsageHistory(P)
    busy(h, 10)
    record = UsageHistoryRecord.model_validate_json(dump_record(h.to_record(10 * HOUR)))
    again = UsageHistory(P)
    again.restore(record, 10 * HOUR)
    assert again.shares(10 * HOUR) == pytest.approx(h.shares(10 * HOUR))
    # A history kept at another resolution reads back too (each bucket says its own span).
    coarse = UsageHistory(UsageParams(window_s=24 * HOUR, half_life_s=6 * HOUR, resolution_s=4 * HOUR))
    coarse.restore(record, 10 * HOUR)
    assert coarse.shares(10 * HOUR)["a"].gpu == pytest.approx(h.shares(10 * HOUR)["a"].gpu)


def test_what_the_new_run_records_continues_the_saved_history() -> None:
    store = MemoryUsageStore()
    first = TimeBasedFairShare(P, store)
    busy(first, 6)
    assert store.saves >= 1 and first.save(6 * HOUR)
    second = TimeBasedFairShare(P, store)  # a restarted scheduler
    usage = second.shares(6 * HOUR)
    assert usage is not None and usage["a"].gpu == pytest.approx(first.history.shares(6 * HOUR)["a"].gpu)
    assert usage["a"].gpu > 0.7 and usage["b"].gpu < usage["a"].gpu


class Unreachable(MemoryUsageStore):
    def load(self) -> UsageHistoryRecord | None:
        raise UsageStoreError("the API server is not reachable")

    def save(self, record: UsageHistoryRecord) -> None:
        raise AssertionError("a history that could not be read must never be overwritten")


def test_nothing_is_saved_over_a_history_that_could_not_be_read() -> None:
    store = Unreachable()
    tbfs = TimeBasedFairShare(P, store)
    assert tbfs.shares(0.0) is None  # fair share without usage this cycle
    store.load = lambda: (_ for _ in ()).throw(AssertionError("retried too soon"))  # type: ignore[method-assign]
    assert tbfs.shares(P.persist_s / 2) is None  # not read again before persist_s
    tbfs.observe(0.0, {"a": Resources(gpu=1)}, Resources(gpu=8))
    tbfs.observe(HOUR, {"a": Resources(gpu=1)}, Resources(gpu=8))
    assert not tbfs.save(HOUR) and not tbfs.loaded


def test_a_store_holding_something_else_is_kept_aside_and_a_new_history_started() -> None:
    store = MemoryUsageStore()
    for bad in ('{"version": 7, "oops": true}', '{"version":1,"savedAt":0,"buckets":[{"start":0,"seconds":1,'
                '"capacity":{"gpu":1e300}}]}', "not json"):  # fmt: skip
        store.text = bad
        tbfs = TimeBasedFairShare(P, store)
        assert tbfs.shares(0.0) == {}
        assert store.unreadable == bad and tbfs.loaded


def test_a_long_history_of_many_queues_is_kept_within_a_configmap() -> None:
    params = UsageParams(window_s=7 * 24 * HOUR, resolution_s=HOUR)
    h = UsageHistory(params)
    queues = [f"team-{i:03d}-with-a-long-name" for i in range(300)]
    for k in range(7 * 24 + 1):
        h.record(k * HOUR, {q: Resources(gpu=1 + i % 3, cpu=1000, memory=1024) for i, q in enumerate(queues)},
                 Resources(gpu=1000, cpu=1e6, memory=1e7))  # fmt: skip
    record = h.to_record(7 * 24 * HOUR)
    assert len(dump_record(record)) <= MAX_RECORD_BYTES
    assert len(record.buckets) < 7 * 24  # older buckets merged, the newest kept as they are
    assert record.buckets[-1].seconds <= HOUR
    restored = UsageHistory(params)
    restored.restore(record, 7 * 24 * HOUR)
    want, got = h.shares(7 * 24 * HOUR), restored.shares(7 * 24 * HOUR)
    assert got[queues[2]].gpu == pytest.approx(want[queues[2]].gpu, rel=0.01)
