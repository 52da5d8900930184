import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.api import GPUAssignment, InvalidGPURequest, parse_gpu_request
from scheduler.api.assignment import AssignedGPU


@pytest.mark.parametrize(
    ("annotations", "limits", "kind", "devices", "milli", "mib"),
    [
        ({"gpu-fraction": "0.5"}, {}, "fraction", 1, 500, 0),
        ({"gpu-fraction": " 0.25 "}, {}, "fraction", 1, 250, 0),
        ({"gpu-fraction": "0.001"}, {}, "fraction", 1, 1, 0),
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}, {}, "fraction", 2, 500, 0),
        ({"gpu-memory": "8192"}, {}, "memory", 1, 0, 8192),
        ({"gpu-memory": "8192", "gpu-fraction-num-devices": "3"}, {}, "memory", 3, 0, 8192),
        ({}, {"nvidia.com/gpu": "2"}, "whole", 2, 1000, 0),
        ({}, {"nvidia.com/gpu": 1}, "whole", 1, 1000, 0),
        ({}, {}, "none", 0, 0, 0),
        ({}, {"nvidia.com/gpu": "0"}, "none", 0, 0, 0),
    ],
)
def test_valid_requests(annotations, limits, kind, devices, milli, mib):
    r = parse_gpu_request(annotations, limits, max_gpu_memory_mib=81920)
    assert (r.kind, r.num_devices, r.milli, r.memory_mib) == (kind, devices, milli, mib)


@pytest.mark.parametrize(
    ("annotations", "limits", "needle"),
    [
        ({"gpu-fraction": "0"}, {}, "strictly between 0 and 1"),
        ({"gpu-fraction": "1"}, {}, "strictly between 0 and 1"),
        ({"gpu-fraction": "1.5"}, {}, "strictly between 0 and 1"),
        ({"gpu-fraction": "-0.2"}, {}, "strictly between 0 and 1"),
        ({"gpu-fraction": "abc"}, {}, "is not a number"),
        ({"gpu-fraction": ""}, {}, "is not a number"),
        ({"gpu-fraction": "nan"}, {}, "finite"),
        ({"gpu-fraction": "inf"}, {}, "finite"),
        ({"gpu-fraction": "1e-9"}, {}, "finer than the smallest share"),
        ({"gpu-fraction": "0.9999"}, {}, "rounds to a whole GPU"),
        ({"gpu-fraction": "0.5", "gpu-memory": "1024"}, {}, "not both"),
        ({"gpu-fraction": "0.5"}, {"nvidia.com/gpu": "1"}, "cannot be combined"),
        ({"gpu-memory": "1024"}, {"nvidia.com/gpu": "2"}, "cannot be combined"),
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"}, {}, "at least 1"),
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "-1"}, {}, "at least 1"),
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "two"}, {}, "not a whole number"),
        ({"gpu-fraction-num-devices": "2"}, {}, "only applies together"),
        ({"gpu-memory": "0"}, {}, "at least 1"),
        ({"gpu-memory": "8Gi"}, {}, "not a whole number"),
        ({"gpu-memory": "90000"}, {}, "more than the largest GPU"),
        ({}, {"nvidia.com/gpu": "1.5"}, "whole number of GPUs"),
        ({}, {"nvidia.com/gpu": "-1"}, "must not be negative"),
    ],
)
def test_invalid_requests_have_clear_messages(annotations, limits, needle):
    with pytest.raises(InvalidGPURequest) as err:
        parse_gpu_request(annotations, limits, max_gpu_memory_mib=81920)
    message = str(err.value)
    assert needle in message
    assert "\n" not in message


@given(st.floats(min_value=0.001, max_value=0.9994, allow_nan=False))
def test_any_fraction_in_range_maps_to_milli(f):
    r = parse_gpu_request({"gpu-fraction": repr(f)})
    assert r.kind == "fraction" and 1 <= r.milli <= 999
    assert abs(r.milli - f * 1000) <= 0.5 + 1e-9


@given(
    st.text(max_size=12), st.one_of(st.none(), st.text(max_size=6)), st.one_of(st.none(), st.text(max_size=6))
)
def test_parser_never_raises_anything_but_invalid_request(fraction, memory, devices):
    annotations = {"gpu-fraction": fraction}
    if memory is not None:
        annotations["gpu-memory"] = memory
    if devices is not None:
        annotations["gpu-fraction-num-devices"] = devices
    try:
        r = parse_gpu_request(annotations, max_gpu_memory_mib=81920)
    except InvalidGPURequest as exc:
        assert str(exc)
        return
    assert r.kind == "fraction"
    assert 0 < float(fraction) < 1 and math.isfinite(float(fraction))
    assert r.num_devices >= 1


@given(st.integers(min_value=-5, max_value=50))
def test_whole_gpu_counts(n):
    if n < 0:
        with pytest.raises(InvalidGPURequest):
            parse_gpu_request({}, {"nvidia.com/gpu": str(n)})
    else:
        r = parse_gpu_request({}, {"nvidia.com/gpu": str(n)})
        assert r.num_devices == n and (r.kind == "whole") == (n > 0)


def test_assignment_round_trip_uses_camel_case():
    a = GPUAssignment(node="n1", gpus=[AssignedGPU(index=1, uuid="GPU-x", milli=250, memory_mib=20480)])
    raw = a.to_annotation()
    assert '"memoryMiB":20480' in raw and '"assumedAt"' in raw
    assert GPUAssignment.from_annotation(raw) == a


@pytest.mark.parametrize(
    "raw", ["", "{", "[]", '{"node": ""}', '{"node": "n", "gpus": [{"index": 0, "milli": 0}]}']
)
def test_malformed_assignment_is_one_line_error(raw):
    with pytest.raises(ValueError) as err:
        GPUAssignment.from_annotation(raw)
    assert "tessera.dev/gpu-assignment is malformed" in str(err.value)
    assert "\n" not in str(err.value)
