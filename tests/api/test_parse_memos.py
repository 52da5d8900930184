"""The parser works out what a part of a pod says once per object only for the parts the pod watch froze
(model/frozen.py): a pod dict written again between two readings (the simulator's, a test's, the webhook's)
is read again, never from a memo."""

from __future__ import annotations

from typing import Any

from scheduler.model import parse
from scheduler.model.frozen import freeze, thaw
from scheduler.model.parse import parse_pod


def pod() -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}],
                     "tolerations": [{"key": "gpu", "operator": "Exists"}]}}  # fmt: skip


def test_parts_written_between_two_readings_are_read_again() -> None:
    obj = pod()
    first = parse_pod(obj)
    obj["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    obj["spec"]["tolerations"][0]["key"] = "fpga"
    obj["metadata"]["labels"]["app"] = "b"
    second = parse_pod(obj)
    assert (first.cpu_milli, first.tolerations[0].key, first.labels) == (1000, "gpu", {"app": "a"})
    assert (second.cpu_milli, second.tolerations[0].key, second.labels) == (3000, "fpga", {"app": "b"})


def test_frozen_parts_are_read_once_for_every_pod_holding_them() -> None:
    a, b = pod(), pod()
    shared = a["spec"]["containers"]
    b["spec"]["containers"] = shared
    b["spec"]["tolerations"] = a["spec"]["tolerations"]
    b["metadata"]["labels"] = a["metadata"]["labels"]
    parts = (shared, a["spec"]["tolerations"], a["metadata"]["labels"])
    for part in parts:
        freeze(part)
    try:
        pa, pb = parse_pod(a), parse_pod(b)
        assert parse._DECLARED_BY_CONTAINERS.get(shared) is not None
        assert pa.tolerations is pb.tolerations and pa.labels is pb.labels and pa == pb
    finally:
        for part in parts:
            thaw(part)
