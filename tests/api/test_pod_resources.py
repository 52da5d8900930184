"""A pod's effective requests as the kubelet computes them (`parse.pod_resources`), sidecars included:
init containers with `restartPolicy: Always` run beside the app containers, so they are summed with them,
and each other init container counts with the sidecars started before it (KEP-753). Before, a sidecar
counted as an init container that finishes, and a GPU pod with a CPU-hungry proxy was charged too little
CPU on its node (found by the property test once it had sidecars: tests/property/)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from scheduler.model.parse import InvalidObject, pod_resources, pod_resources_shared


def c(name: str, cpu: str, *, sidecar: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "resources": {"requests": {"cpu": cpu}}}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


@pytest.mark.parametrize(
    ("containers", "inits", "cpu"),
    [
        ([c("app", "2")], [], "2"),
        ([c("app", "2")], [c("setup", "3")], "3"),  # an init container alone, then the app
        ([c("app", "2")], [c("proxy", "1", sidecar=True)], "3"),  # the sidecar runs beside the app
        ([c("app", "2")], [c("proxy", "1", sidecar=True), c("setup", "3")], "4"),  # setup runs beside proxy
        ([c("app", "2")], [c("setup", "3"), c("proxy", "1", sidecar=True)], "3"),  # setup before proxy
        ([c("a", "1"), c("b", "1")], [c("p", "1", sidecar=True), c("q", "500m", sidecar=True)], "3.5"),
    ],
)
def test_effective_cpu_request(containers: list[Any], inits: list[Any], cpu: str) -> None:
    requests, _ = pod_resources({"containers": containers, "initContainers": inits})
    assert requests["cpu"] == Decimal(cpu)


SPECS = [
    {"containers": [c("app", "2")], "initContainers": [c("proxy", "1", sidecar=True)]},
    {"containers": [c("app", "2")], "initContainers": [c("proxy", "1")]},  # the same, not a sidecar
    {"containers": [{"name": "app", "resources": {"requests": {"cpu": 2}}}]},  # a number, not text
    {"containers": [c("app", "2")], "overhead": {"cpu": "250m"}},
    {"containers": [{"name": "app"}]},
]


def test_pods_declaring_the_same_resources_share_one_reading_and_differ_where_they_differ() -> None:
    for spec in SPECS * 2:  # the second round is read from the memo
        assert pod_resources_shared(spec) == pod_resources(spec)
    assert pod_resources_shared(SPECS[0]) is pod_resources_shared({**SPECS[0]})
    with pytest.raises(TypeError):
        pod_resources_shared(SPECS[0])[0]["cpu"] = Decimal(1)  # type: ignore[index]  # read-only, shared


def test_a_refused_declaration_is_refused_again_naming_each_pods_container() -> None:
    for name in ("first", "second"):
        with pytest.raises(InvalidObject, match=name):
            pod_resources_shared({"containers": [{"name": name, "resources": {"requests": {"cpu": "lots"}}}]})
