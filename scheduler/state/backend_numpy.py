"""numpy's array-API namespace with its hottest Python-level functions bound straight to the array methods.

numpy >= 2.1 implements the array API in its main namespace, but `numpy.take`, `numpy.sum`, `numpy.max`,
`numpy.astype`, `numpy.reshape`... are Python functions that dispatch (`_wrapfunc`, `_wrapreduction`) to
the same ndarray methods: 0.4-0.8 us of each call on the handful of rows a placement decision touches
(`numpy.sum` 1.5 us against 0.7 for `ndarray.sum` on a [5, 8] array; `numpy.take` 0.86 against 0.32).
The fragment kernels make about forty such calls per decision. This namespace is numpy's own module
dictionary with those functions replaced by one-line calls of the methods they end in: same results, same
dtypes, same errors (the test compares them on every dtype and axis the kernels use).
"""

from __future__ import annotations

import types
from typing import Any

import numpy


def _astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Any:
    return x.astype(dtype, copy=copy)


def _take(x: Any, indices: Any, /, *, axis: int | None = None) -> Any:
    return x.take(indices, axis=axis)


def _reshape(x: Any, /, shape: Any, *, copy: bool | None = None) -> Any:
    if copy is not None:  # rare: the full function knows the copy rules
        return numpy.reshape(x, shape, copy=copy)
    return x.reshape(shape)


def _sum(x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    return x.sum(axis=axis, dtype=dtype, keepdims=keepdims)


def _any(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    return x.any(axis=axis, keepdims=keepdims)


def _all(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    return x.all(axis=axis, keepdims=keepdims)


def _max(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    return x.max(axis=axis, keepdims=keepdims)


def _min(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    return x.min(axis=axis, keepdims=keepdims)


def _argmax(x: Any, /, *, axis: int | None = None, keepdims: bool = False) -> Any:
    return x.argmax(axis=axis, keepdims=keepdims)


FAST = {
    "astype": _astype,
    "take": _take,
    "reshape": _reshape,
    "sum": _sum,
    "any": _any,
    "all": _all,
    "max": _max,
    "min": _min,
    "argmax": _argmax,
}


def fast_numpy() -> types.ModuleType:
    """A module named `numpy` (backend checks read the name) holding numpy's namespace, with `FAST`."""
    ns = types.ModuleType("numpy", numpy.__doc__)
    ns.__dict__.update({k: v for k, v in vars(numpy).items() if k not in ("__name__", "__doc__")})
    ns.__dict__.update(FAST)
    return ns


NAMESPACE = fast_numpy()
