"""The parser works out what a part of a pod says once per object only for the parts the pod watch froze
(model/frozen.py): a pod dict written again between two readings (the simulator's, a test's, the webhook's)
is read again, never from a memo."""

from __future__ import annotations

import copy
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


def test_a_spec_is_read_once_for_every_pod_whose_spec_holds_the_same_frozen_parts() -> None:
    """A controller's pods each have a spec of their own holding the same frozen parts but for their node
    (kube/informer.py `_pod_spec`): the spec is read once; a spec holding any other entry, or one more or
    one less, is read on its own."""
    a = pod()
    parts = (a["spec"]["containers"], a["spec"]["tolerations"])
    for part in parts:
        freeze(part)
    try:
        a["spec"]["priorityClassName"] = "high"
        twins = []
        for i in range(3):
            twin = pod()
            twin["metadata"]["name"] = f"p{i}"
            twin["spec"] = {**a["spec"], "nodeName": f"n{i}"}
            twins.append(twin)
        read = [parse_pod(t) for t in twins]
        assert parse._SPEC_READINGS.get(parts[0]) is not None
        assert all(p.node == f"n{i}" and p.tolerations is read[0].tolerations for i, p in enumerate(read))
        other = {**a["spec"], "priorityClassName": "low", "schedulerName": "other", "nodeName": "n0"}
        more = {**a["spec"], "terminationGracePeriodSeconds": 5}
        less = {k: v for k, v in a["spec"].items() if k != "tolerations"}
        swapped = {**a["spec"], "tolerations": [{"key": "fpga", "operator": "Exists"}]}  # as many entries
        for spec in (other, more, less, swapped):
            parse_pod(twins[0])  # the twins' reading is the one kept for these parts
            obj = pod()
            obj["spec"] = spec
            got, cold = parse_pod(obj), parse_pod({**obj, "spec": _thawed(spec)})
            assert got == cold and (got.grace_s, got.ours) == (cold.grace_s, cold.ours)
        assert parse_pod({**pod(), "spec": other}).ours is False
        parse_pod(twins[0])
        assert parse_pod({**pod(), "spec": more}).grace_s == 5.0
        parse_pod(twins[0])
        assert parse_pod({**pod(), "spec": less}).tolerations == ()
        parse_pod(twins[0])
        assert parse_pod({**pod(), "spec": swapped}).tolerations[0].key == "fpga"
    finally:
        for part in parts:
            thaw(part)


def _thawed(spec: dict[str, Any]) -> dict[str, Any]:
    """The same spec made of parts nobody froze (read without any memo)."""
    return copy.deepcopy(spec)


def test_a_spec_with_a_part_nobody_froze_is_read_again_every_time() -> None:
    obj = pod()
    freeze(obj["spec"]["containers"])  # its tolerations are its own: they may be written
    try:
        assert parse_pod(obj).tolerations[0].key == "gpu"
        obj["spec"]["tolerations"][0]["key"] = "fpga"
        assert parse_pod(obj).tolerations[0].key == "fpga"
    finally:
        thaw(obj["spec"]["containers"])
