"""Fuzz: hostile numbers and shapes through every parser raise only the parser's own one-line error, and
whatever is accepted lies inside its documented bound (scheduler/api/limits.py). Long run: see
tests/api/hostile.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from scheduler.api import PodGroup, Queue
from scheduler.api.gpu_request import InvalidGPURequest, parse_gpu_request
from scheduler.api.keys import MILLI_PER_GPU
from scheduler.api.limits import (
    MAX_CPU_MILLI,
    MAX_GPU_MEMORY_MIB,
    MAX_GPUS_PER_NODE,
    MAX_MEMORY_MIB,
    MAX_MIN_MEMBER,
    MAX_QUEUE_GPUS,
)
from scheduler.api.quantity import InvalidQuantity, parse_quantity
from scheduler.model.parse import InvalidObject, parse_node, parse_pod
from tests.api.hostile import (
    fuzz_settings,
    hostile_node,
    hostile_pod,
    hostile_podgroup,
    hostile_queue,
    number_text,
    quantity_value,
)


@fuzz_settings()
@given(st.dictionaries(st.sampled_from(["gpu-fraction", "gpu-memory", "gpu-fraction-num-devices"]), number_text),
       st.one_of(st.none(), quantity_value))  # fmt: skip
def test_gpu_request_parser(annotations: dict[str, str], whole: Any) -> None:
    limits = {} if whole is None else {"nvidia.com/gpu": whole}
    try:
        r = parse_gpu_request(annotations, limits)
    except InvalidGPURequest as exc:
        assert str(exc) and "\n" not in str(exc) and len(str(exc)) < 600
        return
    assert 0 <= r.num_devices <= MAX_GPUS_PER_NODE
    assert 0 <= r.milli <= MILLI_PER_GPU and 0 <= r.memory_mib <= MAX_GPU_MEMORY_MIB
    for value in annotations.values():
        assert value.strip(" \t\r\n").isascii()


@fuzz_settings()
@given(quantity_value)
def test_quantity_parser(raw: Any) -> None:
    try:
        value = parse_quantity(raw)
    except InvalidQuantity as exc:
        assert "\n" not in str(exc)
        return
    assert value >= 0 and value.is_finite()
    if isinstance(raw, str):
        assert raw.isascii()


@fuzz_settings()
@given(hostile_pod())
def test_pod_parser(obj: dict[str, Any]) -> None:
    try:
        pod = parse_pod(obj, max_gpu_memory_mib=81920)
    except InvalidObject as exc:
        assert "\n" not in str(exc)
        return
    assert 0 <= pod.cpu_milli <= MAX_CPU_MILLI and 0 <= pod.memory_mib <= MAX_MEMORY_MIB
    assert 0 <= pod.request.num_devices <= MAX_GPUS_PER_NODE
    assert -(2**31) <= pod.priority < 2**31
    assert pod.error is None or "\n" not in pod.error


@fuzz_settings()
@given(hostile_node())
def test_node_parser(obj: dict[str, Any]) -> None:
    try:
        node = parse_node(obj)
    except InvalidObject as exc:
        assert str(exc).startswith("node ") and "\n" not in str(exc)
        return
    assert 0 <= node.gpu_count <= MAX_GPUS_PER_NODE
    assert 0 <= node.gpu_memory_mib <= MAX_GPU_MEMORY_MIB
    assert 0 <= node.cpu_milli <= MAX_CPU_MILLI and 0 <= node.memory_mib <= MAX_MEMORY_MIB


@fuzz_settings()
@given(hostile_queue(), hostile_podgroup())
def test_crd_models(queue: dict[str, Any], group: dict[str, Any]) -> None:
    try:
        q = Queue.model_validate(queue)
        gpu = q.spec.resources.gpu
        assert gpu.quota <= MAX_QUEUE_GPUS and gpu.limit <= MAX_QUEUE_GPUS
        assert -(2**31) <= q.spec.priority < 2**31
    except ValidationError:
        pass
    try:
        g = PodGroup.model_validate(group)
        assert 1 <= g.spec.min_member <= MAX_MIN_MEMBER
    except ValidationError:
        pass
