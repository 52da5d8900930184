"""The numpy namespace the scheduler runs on (`scheduler/state/backend_numpy.py`) answers as numpy's own functions
do: same values, dtypes and shapes, on every dtype and axis the kernels use, and the same errors."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from scheduler.state.backend import namespace
from scheduler.state.backend_numpy import FAST, NAMESPACE


def _same(a: Any, b: Any) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype
    assert a.shape == b.shape
    assert np.array_equal(a, b, equal_nan=True)


ARRAYS = [
    np.arange(24, dtype=np.int64).reshape(2, 3, 4) - 7,
    np.linspace(-3.5, 9.25, 24).reshape(4, 6),
    np.array([[True, False, True], [False, False, True]]),
    np.array([3, -1, 7, 7, 0], dtype=np.int32),
    np.array([[-np.inf, 2.0, 2.0], [-np.inf, -np.inf, -np.inf]]),
]


def test_the_numpy_backend_is_this_namespace() -> None:
    assert namespace("numpy") is NAMESPACE
    assert NAMESPACE.__name__ == "numpy"  # backend checks read the name
    assert NAMESPACE.where is np.where and NAMESPACE.float64 is np.float64  # the rest is numpy's own


@pytest.mark.parametrize("name", ["sum", "any", "all", "max", "min"])
def test_reductions_match_numpy(name: str) -> None:
    for a in ARRAYS:
        if name in ("max", "min") and a.dtype == np.bool_:
            continue
        for axis, keepdims in itertools.product([None, *range(a.ndim), -1], [False, True]):
            _same(
                getattr(NAMESPACE, name)(a, axis=axis, keepdims=keepdims),
                getattr(np, name)(a, axis=axis, keepdims=keepdims),
            )
    _same(NAMESPACE.sum(ARRAYS[2], axis=1), np.sum(ARRAYS[2], axis=1))  # bool sums count
    _same(NAMESPACE.sum(ARRAYS[3], dtype=np.float64), np.sum(ARRAYS[3], dtype=np.float64))


def test_argmax_take_reshape_astype_match_numpy() -> None:
    for a in ARRAYS:
        for axis in [None, *range(a.ndim)]:
            _same(NAMESPACE.argmax(a, axis=axis), np.argmax(a, axis=axis))
        _same(NAMESPACE.reshape(a, (-1,)), np.reshape(a, (-1,)))
        for dtype in (np.int64, np.float64, np.bool_):
            if dtype is np.int64 and not np.all(np.isfinite(a)):
                continue  # -inf has no integer value
            _same(NAMESPACE.astype(a, dtype), np.astype(a, dtype))
        idx = np.asarray([0, a.shape[0] - 1, 0], dtype=np.int64)
        _same(NAMESPACE.take(a, idx, axis=0), np.take(a, idx, axis=0))
    _same(NAMESPACE.argmax(ARRAYS[4], axis=1, keepdims=True), np.argmax(ARRAYS[4], axis=1, keepdims=True))
    a = ARRAYS[0]
    assert NAMESPACE.astype(a, np.int64) is not a  # a copy, as the array API says by default
    assert NAMESPACE.astype(a, np.int64, copy=False) is a
    assert np.shares_memory(NAMESPACE.reshape(a, (6, 4), copy=None), a)
    assert not np.shares_memory(NAMESPACE.reshape(a, (6, 4), copy=True), a)


def test_errors_match_numpy() -> None:
    a = ARRAYS[1]
    for fast, slow in (
        ((lambda: NAMESPACE.take(a, np.asarray([9]), axis=0)), (lambda: np.take(a, np.asarray([9]), axis=0))),
        (
            (lambda: NAMESPACE.max(a[:0], axis=0)),
            (lambda: np.max(a[:0], axis=0)),
        ),
    ):
        with pytest.raises(Exception) as mine:
            fast()
        with pytest.raises(Exception) as theirs:
            slow()
        assert type(mine.value) is type(theirs.value)
    assert set(FAST) == {"astype", "take", "reshape", "sum", "any", "all", "max", "min", "argmax"}
