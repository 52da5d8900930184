"""Queue units: written as on a pod (GPUs, cores, quantities), held in the scheduler's units (GPUs,
millicores, MiB), and written back in the user's form."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from scheduler.api.queue import Queue, QueueStatus


def queue(resources: dict[str, Any], status: dict[str, Any] | None = None) -> Queue:
    obj: dict[str, Any] = {"metadata": {"name": "q"}, "spec": {"resources": resources}}
    if status is not None:
        obj["status"] = status
    return Queue.model_validate(obj)


@pytest.mark.parametrize(
    ("written", "milli"),
    [(64, 64_000), ("64", 64_000), ("500m", 500), ("0.5", 500), ("1.5", 1500), ("1e3", 1_000_000), (0, 0)],
)
def test_cpu_is_written_in_cores_and_held_in_millicores(written: Any, milli: float) -> None:
    assert queue({"cpu": {"quota": written}}).spec.resources.cpu.quota == milli


@pytest.mark.parametrize(
    ("written", "mib"),
    [("256Gi", 262_144), ("512Mi", 512), ("1Ti", 1_048_576), (1_073_741_824, 1024), ("1G", 1e9 / 2**20)],
)
def test_memory_is_a_quantity_held_in_mib(written: Any, mib: float) -> None:
    assert queue({"memory": {"quota": written}}).spec.resources.memory.quota == pytest.approx(mib)


def test_unset_resources_and_fields_are_unlimited() -> None:
    r = queue({"gpu": {"quota": 2}}).spec.resources
    assert (r.gpu.quota, r.gpu.limit, r.gpu.over_quota_weight) == (2, -1, 1)
    for res in (r.cpu, r.memory):
        assert (res.quota, res.limit, res.over_quota_weight) == (-1, -1, 1)
    assert Queue.model_validate({"metadata": {"name": "q"}}).spec.resources.gpu.quota == -1


@pytest.mark.parametrize("unlimited", [-1, "-1"])
def test_minus_one_means_unlimited_in_every_resource(unlimited: Any) -> None:
    r = queue(
        {"cpu": {"quota": unlimited, "limit": unlimited}, "memory": {"limit": unlimited}}
    ).spec.resources
    assert (r.cpu.quota, r.cpu.limit, r.memory.limit) == (-1, -1, -1)


def test_a_round_trip_gives_the_users_form_back() -> None:
    q = queue(
        {
            "gpu": {"quota": 2.5, "limit": 8},
            "cpu": {"quota": "500m", "limit": 64},
            "memory": {"quota": "1536Mi", "limit": "256Gi"},
        }
    )
    dumped = q.model_dump(by_alias=True, mode="json")["spec"]["resources"]
    assert dumped["cpu"] == {"quota": "500m", "overQuotaWeight": 1.0, "limit": 64}
    assert dumped["memory"] == {"quota": "1536Mi", "overQuotaWeight": 1.0, "limit": "256Gi"}
    assert dumped["gpu"]["quota"] == 2.5
    assert Queue.model_validate(q.model_dump(by_alias=True)) == q


@pytest.mark.parametrize(
    ("resources", "complaint"),
    [
        ({"cpu": {"quota": 0.5}}, 'write fractions as a string, e.g. "0.5"'),
        ({"cpu": {"quota": "lots"}}, "is not a Kubernetes quantity"),
        ({"cpu": {"quota": -2}}, "-1 (unlimited) or >= 0"),
        ({"memory": {"quota": "-5Gi"}}, "is not a Kubernetes quantity"),
        ({"memory": {"quota": True}}, "must be an integer"),
        ({"memory": {"quota": "2Gi", "limit": "1Gi"}}, "limit 1Gi is below quota 2Gi"),
        ({"cpu": {"quota": 8, "limit": "500m"}}, "limit 500m is below quota 8"),
        ({"gpu": {"quota": 4, "limit": 2}}, "limit 2 is below quota 4"),
        ({"gpu": {"quota": -0.5}}, "quota must be >= 0 or -1"),
    ],
)
def test_bad_amounts_are_refused_in_the_users_units(resources: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValidationError) as err:
        queue(resources)
    assert complaint in str(err.value)


def test_status_is_published_in_gpus_cores_and_bytes() -> None:
    internal = QueueStatus.from_internal(
        allocated={"gpu": 1.5, "cpu": 2500.0, "memory": 1024.0}, requested={}, fair_share={"cpu": 500.0}
    )
    dumped = internal.model_dump(by_alias=True)
    assert dumped["allocated"] == {"gpu": 1.5, "cpu": 2.5, "memory": 1024 * 2**20}
    assert dumped["fairShare"] == {"cpu": 0.5}
    assert QueueStatus.model_validate(dumped) == internal  # read back into the scheduler's units
