"""Parse a pod's GPU request from its annotations and container limits.

Every invalid value is rejected with a message a user can act on; nothing is silently ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict

from scheduler.api.keys import (
    GPU_FRACTION,
    GPU_FRACTION_NUM_DEVICES,
    GPU_MEMORY,
    MILLI_PER_GPU,
    WHOLE_GPU_RESOURCE,
)
from scheduler.api.limits import MAX_GPU_MEMORY_MIB, MAX_GPUS_PER_NODE, MAX_NUMBER_CHARS
from scheduler.api.quantity import InvalidQuantity, parse_quantity

RequestKind = Literal["none", "whole", "fraction", "memory"]


class InvalidGPURequest(ValueError):
    """The pod's GPU request cannot be honoured as written."""


class GPURequest(BaseModel):
    """What one pod asks of GPUs.

    `milli` is per device (1000 for whole GPUs, 0 when the request is by memory); `memory_mib` is per
    device for `gpu-memory` requests (0 otherwise). The scheduler converts one into the other with each
    candidate GPU's memory.
    """

    model_config = ConfigDict(frozen=True)

    kind: RequestKind = "none"
    num_devices: int = 0
    milli: int = 0
    memory_mib: int = 0

    @property
    def is_fractional(self) -> bool:
        return self.kind in ("fraction", "memory")

    def describe(self) -> str:
        if self.kind == "none":
            return "no GPU"
        if self.kind == "whole":
            return f"{self.num_devices} whole GPU{'s' if self.num_devices != 1 else ''}"
        each = f"{self.milli / MILLI_PER_GPU:g} GPU" if self.kind == "fraction" else f"{self.memory_mib} MiB"
        return each if self.num_devices == 1 else f"{each} on each of {self.num_devices} GPUs"


# What KAI (Go's strconv.ParseFloat / ParseInt) and Kubernetes users write: ASCII digits only. Python's
# float() and int() also take "1_000", "٠.٥" and "０.５", which no one writes on purpose.
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?", re.ASCII)
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_NOT_FINITE = {"nan", "inf", "infinity"}
# Only ASCII blanks around a value are forgiven (YAML authors add them); str.strip() would take any
# Unicode space.
_BLANKS = " \t\r\n"


def _shown(raw: object) -> str:
    """The value as it may appear in a one-line message: escaped (no newline gets through) and short."""
    text = str(raw)
    text = text if len(text) <= MAX_NUMBER_CHARS else text[:MAX_NUMBER_CHARS] + "..."
    return text.encode("unicode_escape").decode("ascii").replace('"', '\\"')


def _parse_fraction(raw: str) -> int:
    text = raw.strip(_BLANKS)
    if text.lstrip("+-").lower() in _NOT_FINITE:
        raise InvalidGPURequest(
            f'annotation {GPU_FRACTION}="{_shown(raw)}" must be a finite number between 0 and 1'
        )
    if len(text) > MAX_NUMBER_CHARS or not _DECIMAL.fullmatch(text):
        raise InvalidGPURequest(
            f'annotation {GPU_FRACTION}="{_shown(raw)}" is not a number; '
            'use a value between 0 and 1 such as "0.5"'
        )
    value = Decimal(text)
    if value <= 0 or value >= 1:
        raise InvalidGPURequest(
            f'annotation {GPU_FRACTION}="{_shown(raw)}" must be strictly between 0 and 1; '
            f"for whole GPUs set resources.limits[{WHOLE_GPU_RESOURCE}] instead"
        )
    milli = int((value * MILLI_PER_GPU).to_integral_value(rounding=ROUND_HALF_EVEN))
    if milli < 1:
        raise InvalidGPURequest(
            f'annotation {GPU_FRACTION}="{_shown(raw)}" is finer than the smallest share (0.001 of a GPU)'
        )
    if milli >= MILLI_PER_GPU:
        raise InvalidGPURequest(
            f'annotation {GPU_FRACTION}="{_shown(raw)}" rounds to a whole GPU; '
            f"ask for resources.limits[{WHOLE_GPU_RESOURCE}]: 1 instead"
        )
    return milli


def _parse_positive_int(raw: str, what: str, hint: str, maximum: int) -> int:
    text = raw.strip(_BLANKS)
    if len(text) > MAX_NUMBER_CHARS or not _INTEGER.fullmatch(text):
        raise InvalidGPURequest(f'{what}="{_shown(raw)}" is not a whole number; {hint}')
    value = int(text)
    if value < 1:
        raise InvalidGPURequest(f'{what}="{_shown(raw)}" must be at least 1; {hint}')
    if value > maximum:
        raise InvalidGPURequest(f'{what}="{_shown(raw)}" must be at most {maximum}')
    return value


def _whole_gpu_limit(limits: Mapping[str, object]) -> int:
    raw = limits.get(WHOLE_GPU_RESOURCE)
    if raw is None:
        return 0
    where = f"resources.limits[{WHOLE_GPU_RESOURCE}]"
    try:
        value = parse_quantity(raw.strip(_BLANKS) if isinstance(raw, str) else raw)
    except InvalidQuantity as exc:
        if "negative" in str(exc):
            raise InvalidGPURequest(f'{where}="{_shown(raw)}" must not be negative') from None
        raise InvalidGPURequest(f"{where}: {exc}; it must be a whole number of GPUs") from None
    if value != value.to_integral_value():
        raise InvalidGPURequest(f'{where}="{_shown(raw)}" must be a whole number of GPUs')
    if value > MAX_GPUS_PER_NODE:
        raise InvalidGPURequest(
            f"{where}={value} is more GPUs than any node can have (at most {MAX_GPUS_PER_NODE})"
        )
    return int(value)


def parse_gpu_request(
    annotations: Mapping[str, str] | None,
    limits: Mapping[str, object] | None = None,
    *,
    max_gpu_memory_mib: int | None = None,
) -> GPURequest:
    """Return the pod's GPU request or raise `InvalidGPURequest` with a clear, single-line reason.

    `limits` is the sum of the containers' limits. `max_gpu_memory_mib`, when known, is the memory of the
    largest GPU in the cluster: a `gpu-memory` request above it could never run and is rejected.
    """
    annotations = annotations or {}
    limits = limits or {}
    fraction = annotations.get(GPU_FRACTION)
    memory = annotations.get(GPU_MEMORY)
    num_raw = annotations.get(GPU_FRACTION_NUM_DEVICES)
    whole = _whole_gpu_limit(limits)

    if fraction is not None and memory is not None:
        raise InvalidGPURequest(f"set either {GPU_FRACTION} or {GPU_MEMORY}, not both")
    if (fraction is not None or memory is not None) and whole:
        raise InvalidGPURequest(
            f"a fractional request ({GPU_FRACTION if fraction is not None else GPU_MEMORY}) cannot be "
            f"combined with resources.limits[{WHOLE_GPU_RESOURCE}]={whole}; use one or the other"
        )
    if num_raw is not None and fraction is None and memory is None:
        raise InvalidGPURequest(
            f"{GPU_FRACTION_NUM_DEVICES} only applies together with {GPU_FRACTION} or {GPU_MEMORY}"
        )
    num_devices = (
        1
        if num_raw is None
        else _parse_positive_int(
            num_raw,
            f"annotation {GPU_FRACTION_NUM_DEVICES}",
            'give the number of GPUs, e.g. "2"',
            MAX_GPUS_PER_NODE,
        )
    )
    if fraction is not None:
        return GPURequest(kind="fraction", num_devices=num_devices, milli=_parse_fraction(fraction))
    if memory is not None:
        mib = _parse_positive_int(
            memory, f"annotation {GPU_MEMORY}", 'give MiB of one GPU, e.g. "8192"', MAX_GPU_MEMORY_MIB
        )
        if max_gpu_memory_mib is not None and mib > max_gpu_memory_mib:
            raise InvalidGPURequest(
                f'annotation {GPU_MEMORY}="{mib}" MiB is more than the largest GPU in the cluster '
                f"({max_gpu_memory_mib} MiB)"
            )
        return GPURequest(kind="memory", num_devices=num_devices, memory_mib=mib)
    if whole:
        return GPURequest(kind="whole", num_devices=whole, milli=MILLI_PER_GPU)
    return GPURequest()
