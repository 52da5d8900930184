"""The cyclic collector is paused over bulk work of the cache only, and comes back as it was."""

from __future__ import annotations

import gc

import pytest

from scheduler.cache.gc_pause import BULK, paused_gc


def test_a_bulk_batch_runs_without_the_collector_and_it_comes_back_even_after_a_failure() -> None:
    assert gc.isenabled()
    with paused_gc(BULK - 1):
        assert gc.isenabled()  # a small batch: collections amortise
    with pytest.raises(RuntimeError), paused_gc(BULK):
        assert not gc.isenabled()
        raise RuntimeError("one bad object")
    assert gc.isenabled()


def test_a_collector_turned_off_by_someone_else_stays_off() -> None:
    gc.disable()
    try:
        with paused_gc(BULK):
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
