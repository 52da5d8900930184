"""Per-call NVML error handling, shared by the real and the fake backend so both behave alike.

NotSupported leaves the field None (a GPU without a power sensor is not broken); GpuIsLost and
ResetRequired mark the GPU unhealthy; any other NVML error leaves the field None and is named in
`DeviceSample.errors`. One failing call never stops the other calls or the other GPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pynvml

from node_agent.nvml.facade import DeviceSample

T = TypeVar("T")

# Errors after which the GPU cannot be trusted until it is reset.
FATAL_ERRORS: tuple[type[Exception], ...] = (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_ResetRequired)


def guarded(sample: DeviceSample, field: str, read: Callable[[], T]) -> T | None:
    """Run one NVML read for `sample`; map its NVML error onto the sample instead of raising."""
    try:
        return read()
    except pynvml.NVMLError_NotSupported:
        return None
    except FATAL_ERRORS as exc:
        sample.healthy = False
        sample.health_reason = sample.health_reason or nvml_message(exc)
        sample.errors[field] = nvml_message(exc)
        return None
    except pynvml.NVMLError as exc:
        sample.errors[field] = nvml_message(exc)
        return None


def nvml_message(exc: BaseException) -> str:
    """NVML's own text for an error, safe even when the library is gone."""
    try:
        return str(exc)
    except Exception:
        return type(exc).__name__
