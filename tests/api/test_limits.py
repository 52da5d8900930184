"""Every parsed number has a bound (scheduler/api/limits.py) and a one-line error outside it.

The issue's findings: one hostile pod annotation or node label made every cycle raise (OverflowError),
so no pod anywhere was bound. Here each of them is refused where it is parsed, and a cycle with the
hostile object in it still binds everyone else.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from scheduler.api import GPUNodeReport, InvalidGPURequest, PodGroupSpec, QueueResource, parse_gpu_request
from scheduler.api.assignment import GPUAssignment
from scheduler.api.limits import MAX_GPU_MEMORY_MIB, MAX_GPUS_PER_NODE
from scheduler.api.quantity import InvalidQuantity, parse_quantity
from scheduler.api.queue import QueueResources, QueueSpec
from scheduler.model.parse import InvalidObject, parse_node, parse_pod
from tests.framework.helpers import A100, cluster, node, phase, pod, run

HUGE = "9" * 4000  # thousands of digits: int() of it is fine, float() of it or an array write is not
NINETEEN = "9" * 19  # above int64


@pytest.mark.parametrize(
    ("annotations", "limits", "needle"),
    [
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": HUGE}, {}, "is not a whole number"),
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": NINETEEN}, {}, "must be at most 64"),
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "65"}, {}, "must be at most 64"),
        ({"gpu-memory": NINETEEN}, {}, f"must be at most {MAX_GPU_MEMORY_MIB}"),
        ({"gpu-memory": HUGE}, {}, "is not a whole number"),
        ({}, {"nvidia.com/gpu": NINETEEN}, "more GPUs than any node can have"),
        ({}, {"nvidia.com/gpu": HUGE}, "longer than 64 characters"),
        ({}, {"nvidia.com/gpu": "1e17"}, "more GPUs than any node can have"),
        # What Python's parsers take and no Kubernetes user or KAI would write.
        ({"gpu-fraction": "٠.٥"}, {}, "is not a number"),
        ({"gpu-fraction": "０.５"}, {}, "is not a number"),
        ({"gpu-fraction": "0.5\u3000"}, {}, "is not a number"),
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "1_0"}, {}, "is not a whole number"),
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "٢"}, {}, "is not a whole number"),
        ({"gpu-memory": "1_000"}, {}, "is not a whole number"),
        ({}, {"nvidia.com/gpu": "1_000"}, "not a valid Kubernetes quantity"),
        ({}, {"nvidia.com/gpu": "２"}, "not a valid Kubernetes quantity"),
    ],
)
def test_out_of_bound_and_foreign_numbers_are_refused_in_one_line(
    annotations: dict[str, str], limits: dict[str, object], needle: str
) -> None:
    with pytest.raises(InvalidGPURequest) as err:
        parse_gpu_request(annotations, limits)
    message = str(err.value)
    assert needle in message and "\n" not in message
    assert len(message) < 400, "a hostile value is shortened, not echoed whole"


@pytest.mark.parametrize(
    ("annotations", "limits", "kind", "devices", "milli", "mib"),
    [
        ({"gpu-fraction": ".5"}, {}, "fraction", 1, 500, 0),
        ({"gpu-fraction": "5e-1"}, {}, "fraction", 1, 500, 0),  # Go's ParseFloat, as KAI reads it
        ({"gpu-fraction": "+0.25", "gpu-fraction-num-devices": "+2"}, {}, "fraction", 2, 250, 0),
        ({"gpu-memory": str(MAX_GPU_MEMORY_MIB)}, {}, "memory", 1, 0, MAX_GPU_MEMORY_MIB),
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "64"}, {}, "fraction", 64, 500, 0),
        ({}, {"nvidia.com/gpu": "64"}, "whole", 64, 1000, 0),
        ({}, {"nvidia.com/gpu": "2.0"}, "whole", 2, 1000, 0),
    ],
)
def test_values_at_the_bounds_are_accepted(
    annotations: dict[str, str], limits: dict[str, object], kind: str, devices: int, milli: int, mib: int
) -> None:
    r = parse_gpu_request(annotations, limits)
    assert (r.kind, r.num_devices, r.milli, r.memory_mib) == (kind, devices, milli, mib)


@pytest.mark.parametrize(
    ("raw", "value"),
    [("500m", "0.5"), ("4", "4"), ("16Gi", str(16 * 2**30)), ("1e3", "1000"), ("1.5k", "1500"),
     (".5", "0.5"), ("5.", "5"), ("+1", "1"), ("2u", "0.000002"), (3, "3"), (0.25, "0.25")],
)  # fmt: skip
def test_kubernetes_quantity_grammar(raw: object, value: str) -> None:
    from decimal import Decimal

    assert parse_quantity(raw) == Decimal(value)


@pytest.mark.parametrize(
    "raw",
    ["1_000", "٠.٥", "０.５", "1K", "1ki", "1e", " 1", "1 ", "Infinity", "nan", "", "--1", "1e1234", True,
     float("inf"), None, [1], "-1"],
)  # fmt: skip
def test_what_the_api_server_would_not_accept_is_not_a_quantity(raw: object) -> None:
    with pytest.raises(InvalidQuantity):
        parse_quantity(raw)


def _pod(**resources: Any) -> dict[str, Any]:
    p = pod("p", "default", arrival_s=0, duration_s=10)
    p["spec"]["containers"][0]["resources"] = resources
    return p


@pytest.mark.parametrize(
    ("resources", "needle"),
    [
        ({"requests": {"cpu": "1e17"}}, "requests.cpu"),
        ({"requests": {"memory": "9Ei"}}, "requests.memory"),
        ({"limits": {"nvidia.com/gpu": HUGE}}, "limits.nvidia.com/gpu"),
        ({"requests": {"cpu": "١"}}, "not a valid Kubernetes quantity"),
    ],
)
def test_pod_resources_out_of_bound_make_an_invalid_pod_not_an_exception(
    resources: dict[str, Any], needle: str
) -> None:
    info = parse_pod(_pod(**resources))
    assert info.error is not None and needle in info.error and "\n" not in info.error
    assert info.cpu_milli == 0 and info.request.kind == "none"


def test_many_containers_cannot_add_up_past_the_bound() -> None:
    p = _pod(requests={"cpu": "1000000"})
    p["spec"]["containers"] = [dict(p["spec"]["containers"][0], name=f"c{i}") for i in range(3)]
    info = parse_pod(p)
    assert info.error is not None and "total requests.cpu" in info.error


def test_pod_priority_must_be_int32() -> None:
    p = _pod()
    p["spec"]["priority"] = 2**70
    assert "32-bit" in (parse_pod(p).error or "")


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.memory": "99999999999999999999"}), "is not MiB"),
        (lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.memory": "99999999"}), "more than any GPU"),
        (lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.memory": "٤٠٩٦٠"}), "is not MiB"),
        (lambda n: n["status"]["capacity"].update({"nvidia.com/gpu": str(2**31)}), "nvidia.com/gpu"),
        (lambda n: n["status"]["capacity"].update({"nvidia.com/gpu": "1.5"}), "whole number of GPUs"),
        (lambda n: n["status"]["capacity"].update({"cpu": "1e17"}), "cpu"),
        (lambda n: n["status"]["capacity"].update({"memory": "1e400"}), "memory"),
        (lambda n: n["metadata"].update({"labels": ["a"]}), "must be a map"),
        (lambda n: n.update({"spec": {"taints": "NoSchedule"}}), "spec.taints"),
    ],
)  # fmt: skip
def test_a_hostile_node_is_unusable_with_a_reason(change: Any, needle: str) -> None:
    n = node("n1", A100, 8, 64, 256)
    change(n)
    with pytest.raises(InvalidObject) as err:
        parse_node(n)
    assert str(err.value).startswith("node n1 is unusable: ") and needle in str(err.value)
    assert "\n" not in str(err.value)


def test_crd_numbers_are_bounded() -> None:
    for bad in ({"quota": float("inf")}, {"limit": float("nan")}, {"overQuotaWeight": 1e300}):
        with pytest.raises(ValidationError):
            QueueResource.model_validate(bad)
    with pytest.raises(ValidationError, match="more than the largest accepted"):
        QueueResources.model_validate({"gpu": {"quota": 1e30}})
    with pytest.raises(ValidationError):
        QueueSpec.model_validate({"priority": 2**40})
    for members in (0, 10**30, "1_0", True):
        with pytest.raises(ValidationError):
            PodGroupSpec.model_validate({"minMember": members})
    with pytest.raises(ValueError, match="malformed"):
        GPUAssignment.from_annotation(f'{{"node":"n","gpus":[{{"index":{2**40},"milli":500}}]}}')
    report = {"metadata": {"name": "n"}, "spec": {"node": "n", "observedAt": "t", "gpus": [
        {"index": 0, "uuid": "u", "model": "m", "memoryTotalMiB": 1, "memoryUsedMiB": 10**30}]}}  # fmt: skip
    with pytest.raises(ValidationError):
        GPUNodeReport.model_validate(report)
    assert MAX_GPUS_PER_NODE == 64


HOSTILE_PODS: list[tuple[str, dict[str, str], dict[str, str]]] = [
    ("num-devices-4000-digits", {"gpu-fraction": "0.5", "gpu-fraction-num-devices": HUGE}, {}),
    ("num-devices-19-digits", {"gpu-fraction": "0.5", "gpu-fraction-num-devices": NINETEEN}, {}),
    ("whole-19-digits", {}, {"nvidia.com/gpu": NINETEEN}),
    ("memory-19-digits", {"gpu-memory": NINETEEN}, {}),
]


@pytest.mark.parametrize(("name", "annotations", "limits"), HOSTILE_PODS, ids=[h[0] for h in HOSTILE_PODS])
def test_one_hostile_pod_does_not_stop_scheduling(
    name: str, annotations: dict[str, str], limits: dict[str, str]
) -> None:
    bad = pod(name, "default", arrival_s=0, duration_s=100, annotations=annotations)
    bad["spec"]["containers"][0]["resources"]["limits"].update(limits)
    cpu_bomb = pod("cpu-bomb", "default", arrival_s=0, duration_s=100, cpu="1e17")
    good = pod("good", "default", arrival_s=0, duration_s=100, annotations={"gpu-fraction": "0.5"})
    sim, sched = cluster([node("n1", A100, 2, 16, 64), bad, cpu_bomb, good])
    run(sim, sched, cycles=3)
    assert phase(sim, "default/good") == "Running"
    assert phase(sim, f"default/{name}") == phase(sim, "default/cpu-bomb") == "Pending"


@pytest.mark.parametrize(
    ("label", "gpus"), [("99999999999999999999", "2"), ("40960", str(2**31)), ("40960", NINETEEN)]
)
def test_one_hostile_node_does_not_stop_scheduling(label: str, gpus: str) -> None:
    bad = node("bad", A100, 2, 16, 64)
    bad["metadata"]["labels"]["nvidia.com/gpu.memory"] = label
    bad["status"]["capacity"]["nvidia.com/gpu"] = gpus
    good = pod("good", "default", arrival_s=0, duration_s=100, annotations={"gpu-fraction": "0.5"})
    sim, sched = cluster([bad, node("n1", A100, 2, 16, 64), good])
    run(sim, sched, cycles=3)
    assert phase(sim, "default/good") == "Running"
    assert any("node bad is unusable" in e for e in sched.cache.errors)
