"""A pod's effective requests as the kubelet computes them (`parse.pod_resources`), sidecars included:
init containers with `restartPolicy: Always` run beside the app containers, so they are summed with them,
and each other init container counts with the sidecars started before it (KEP-753). Before, a sidecar
counted as an init container that finishes, and a GPU pod with a CPU-hungry proxy was charged too little
CPU on its node (found by the property test once it had sidecars: tests/property/)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from scheduler.model.parse import pod_resources


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
