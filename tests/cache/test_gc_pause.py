"""The cyclic collector is paused over bulk work of the cache only, and comes back as it was, what the batch
made promoted to the oldest generation."""

from __future__ import annotations

import gc
import weakref

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


class _Node:
    def __init__(self) -> None:
        self.other: object = None


def test_what_a_bulk_batch_made_is_promoted_to_the_oldest_generation_and_its_cycles_are_still_collected() -> (
    None
):
    with paused_gc(BULK):
        kept = _Node()
        a, b = _Node(), _Node()
        a.other, b.other = b, a  # a cycle, garbage once dropped
        gone = weakref.ref(a)
    assert gc.get_freeze_count() == 0  # nothing stays frozen
    assert any(o is kept for o in gc.get_objects(generation=2))  # no young collection will scan it
    del a, b
    assert gone() is not None  # a cycle: reference counting alone does not free it
    gc.collect()
    assert gone() is None  # the full collection finds it
