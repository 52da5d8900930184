"""The `tessera.dev/gpu-allocated` annotation (scheduler/api/allocation.py): what the device plugin writes
once the kubelet holds a pod's devices, read by the scheduler."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler.api.allocation import AllocatedGPU, GPUAllocation


def test_round_trip_and_wire_format() -> None:
    at = datetime(2026, 12, 4, 10, 0, 0, 123000, tzinfo=UTC)
    a = GPUAllocation(gpus=[AllocatedGPU(index=1, uuid="GPU-b"), AllocatedGPU(index=3, uuid="GPU-d")], at=at)
    raw = a.to_annotation()
    assert (
        raw
        == '{"gpus":[{"index":1,"uuid":"GPU-b"},{"index":3,"uuid":"GPU-d"}],"at":"2026-12-04T10:00:00.123000Z"}'
    )
    assert GPUAllocation.from_annotation(raw) == a and a.indexes == [1, 3]


def test_a_bare_time_from_an_older_plugin_reads_as_allocated_gpus_unknown() -> None:
    a = GPUAllocation.from_annotation("2026-12-04T10:00:00.000Z")
    assert a.gpus == [] and a.at == datetime(2026, 12, 4, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("yesterday", "not JSON nor a time"),
        ('{"gpus": [{"index": -1}]}', "gpus.0.index"),
        ('{"gpus": [{"index": 64}]}', "gpus.0.index"),
        ('{"gpus": "all"}', "gpus"),
        ("[1, 2]", "malformed"),
    ],
)
def test_malformed_values_give_one_line_reasons(raw: str, why: str) -> None:
    with pytest.raises(ValueError) as err:
        GPUAllocation.from_annotation(raw)
    text = str(err.value)
    assert text.startswith("annotation tessera.dev/gpu-allocated is malformed") and "\n" not in text
    assert why in text
