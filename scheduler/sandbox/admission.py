"""The kubelet's own admission check: does the pod fit what the node has left (GeneralPredicates)?

A scheduler that over-commits a node is caught here as on a real node: the pod is refused with
`OutOf<resource>` ("Node didn't have enough resource: cpu, requested: 4000, used: 30000, capacity: 32000").
Device resources are judged by the device manager instead (it knows which devices are free).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

Obj = Mapping[str, Any]


class AdmissionError(Exception):
    """The pod cannot be admitted; `reason` and the message are what the kubelet writes on the pod."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """Effective requests: max(sum over containers, any init container); a limit alone is the request."""
    spec = pod.get("spec") or {}

    def of(container: Obj) -> dict[str, Decimal]:
        resources = container.get("resources") or {}
        out = {k: Decimal(parse_quantity(v)) for k, v in (resources.get("limits") or {}).items()}
        out.update({k: Decimal(parse_quantity(v)) for k, v in (resources.get("requests") or {}).items()})
        return out

    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    return total


def _shown(resource: str, value: Decimal) -> str:
    return str(int(value * 1000)) if resource == "cpu" else str(int(value))


def check_fit(
    pod: Obj, admitted: Iterable[Obj], allocatable: Mapping[str, str], *, device_resources: set[str]
) -> None:
    """Raise AdmissionError when `pod` does not fit next to the `admitted` pods on this node."""
    try:
        need = pod_requests(pod)
        used: dict[str, Decimal] = {"pods": Decimal(0)}
        for other in admitted:
            used["pods"] += 1
            for k, v in pod_requests(other).items():
                used[k] = used.get(k, Decimal(0)) + v
    except (ValueError, ArithmeticError) as exc:
        raise AdmissionError("UnexpectedAdmissionError", f"unreadable resource quantity: {exc}") from None
    need["pods"] = Decimal(1)
    for resource, amount in sorted(need.items()):
        if amount <= 0 or resource in device_resources:
            continue
        capacity = Decimal(parse_quantity(allocatable.get(resource, "0")))
        have = used.get(resource, Decimal(0))
        if have + amount > capacity:
            if resource == "pods":
                raise AdmissionError(
                    "OutOfpods",
                    f"Node didn't have enough resource: pods, requested: 1, used: {int(have)}, capacity: {int(capacity)}",
                )
            raise AdmissionError(
                f"OutOf{resource}",
                f"Node didn't have enough resource: {resource}, requested: {_shown(resource, amount)}, "
                f"used: {_shown(resource, have)}, capacity: {_shown(resource, capacity)}",
            )
