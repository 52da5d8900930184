"""Array backend selection: numpy, CuPy or array-api-strict, all through the array API.

`TESSERA_ARRAY_BACKEND=auto|numpy|cupy|strict`. `auto` picks CuPy only when a CUDA device is usable and
the cluster is large enough for the GPU to win (`TESSERA_CUPY_MIN_GPUS`, default 20000 GPU slots: below
that, kernel launch and transfer latency dominate a per-pod placement step). `strict` is
array-api-strict, used by the tests to keep kernels portable to CuPy without a GPU.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

BACKENDS = ("auto", "numpy", "cupy", "strict")
DEFAULT_CUPY_MIN_GPUS = 20_000

ArrayNamespace = Any  # the array API has no static type; kernels take `xp` and use only its standard API


class BackendError(RuntimeError):
    pass


@cache
def cupy_usable() -> bool:
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:  # no cupy, no driver, no device: all mean "not usable"
        return False


def backend_name(requested: str | None = None, *, problem_gpus: int = 0) -> str:
    """Resolve the backend name from the argument (a command's `--backend`) or the environment; an error
    names whichever of the two asked."""
    asked = (
        f"--backend {requested}"
        if requested
        else f"TESSERA_ARRAY_BACKEND={os.environ.get('TESSERA_ARRAY_BACKEND')}"
    )
    name = (requested or os.environ.get("TESSERA_ARRAY_BACKEND") or "auto").strip().lower()
    if name not in BACKENDS:
        raise BackendError(f"{asked}: not one of {', '.join(BACKENDS)}")
    if name == "auto":
        threshold = int(os.environ.get("TESSERA_CUPY_MIN_GPUS", DEFAULT_CUPY_MIN_GPUS))
        return "cupy" if problem_gpus >= threshold and cupy_usable() else "numpy"
    if name == "cupy" and not cupy_usable():
        instead = "--backend numpy or auto" if requested else "TESSERA_ARRAY_BACKEND=numpy or auto"
        raise BackendError(
            f"{asked}: CuPy or a CUDA device is not available (CuPy comes with pip install 'tessera[gpu]'; "
            f"{instead} runs without it)"
        )
    return name


def namespace(name: str) -> ArrayNamespace:
    """The array-API namespace for a resolved backend name."""
    if name == "numpy":
        import numpy

        # numpy >= 2.1 implements the array API (2023.12) in its main namespace: use it directly; the
        # compat wrapper adds a Python call to every array op, ~10% of a placement decision (see
        # docs/performance.md), and the hottest of numpy's own Python-level functions are bound straight
        # to the array methods (`backend_numpy.py`). Older numpy goes through array-api-compat.
        if getattr(numpy, "__array_api_version__", "") >= "2023.12":
            from scheduler.state.backend_numpy import NAMESPACE

            return NAMESPACE
        import array_api_compat.numpy as xp_numpy

        return xp_numpy
    if name == "cupy":
        import array_api_compat.cupy as xp_cupy

        return xp_cupy
    if name == "strict":
        try:
            import array_api_strict
        except ImportError as exc:
            raise BackendError("backend 'strict' needs the array-api-strict package ([dev] extra)") from exc
        return array_api_strict
    raise BackendError(f"unknown backend {name!r}")


def get_namespace(requested: str | None = None, *, problem_gpus: int = 0) -> ArrayNamespace:
    return namespace(backend_name(requested, problem_gpus=problem_gpus))


def to_numpy(x: Any) -> Any:
    """Bring an array back to host numpy (for reporting, never on the per-pod hot path)."""
    import numpy as np

    if hasattr(x, "get"):  # CuPy
        return x.get()
    return np.asarray(x)
