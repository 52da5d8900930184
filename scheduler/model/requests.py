"""A pod's whole resource request, as the kubelet and kube-scheduler compute it.

Per resource (every name in `requests`: cpu, memory, ephemeral-storage, hugepages-*, extended resources):

- a container's request defaults to its limit (the API server's defaulting, applied here too so that a
  manifest read from a file means what it would mean on a cluster);
- app containers add up; so do sidecars (init containers with `restartPolicy: Always`, Kubernetes 1.29+),
  which start before the later init containers and stay for the pod's life; an ordinary init container
  runs alone, next to the sidecars started before it, so the pod needs the largest of those moments;
- pod-level `spec.resources.requests` (cpu, memory, hugepages) replace the containers' total of that
  resource (PodLevelResources, beta and on in 1.34; a pod-level limit stands in for a missing request
  when no container asks for that resource);
- `spec.overhead` (set from the RuntimeClass at admission) is added.

This is component-helpers' `resource.PodRequests`, which kube-scheduler's NodeResourcesFit reads and the
kubelet admits pods by. Values stay exact (`Decimal`) here; `scheduler/model/parse.py` converts them to
the scheduler's units and bounds them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

Obj = Mapping[str, Any]
ReadList = Callable[[object, str], dict[str, Decimal]]  # a resource list read and checked by the caller

POD_LEVEL_RESOURCES = ("cpu", "memory")  # and every hugepages-<size>
HUGEPAGES_PREFIX = "hugepages-"


def pod_level_supported(name: str) -> bool:
    return name in POD_LEVEL_RESOURCES or name.startswith(HUGEPAGES_PREFIX)


def _add(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for k, v in more.items():
        total[k] = total.get(k, Decimal(0)) + v


def _max(total: dict[str, Decimal], other: Mapping[str, Decimal]) -> None:
    for k, v in other.items():
        if k not in total or v > total[k]:
            total[k] = v


def container_requests(resources: Obj, read: ReadList, what: str) -> dict[str, Decimal]:
    """A container's requests, each missing one defaulted to its limit."""
    requests = read(resources.get("requests"), f"{what}.requests")
    for k, v in read(resources.get("limits"), f"{what}.limits").items():
        requests.setdefault(k, v)
    return requests


def aggregate(
    containers: Iterable[tuple[Obj, bool]], per_container: Callable[[Obj], dict[str, Decimal]]
) -> dict[str, Decimal]:
    """The containers' total: `containers` are (container, is_init) in spec order, app containers first.

    Sidecars add up with the app containers and with each other; an ordinary init container needs its
    own request plus the sidecars started before it; the pod needs the larger of the sum and the
    largest init moment (component-helpers' AggregateContainerRequests)."""
    total: dict[str, Decimal] = {}
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for c, is_init in containers:
        own = per_container(c)
        if not is_init:
            _add(total, own)
        elif c.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            _max(init_peak, sidecars)
        else:
            moment = dict(own)
            _add(moment, sidecars)
            _max(init_peak, moment)
    _max(total, init_peak)
    return total


def pod_requests(
    spec: Obj,
    containers: list[tuple[Obj, bool]],
    per_container: Callable[[Obj], dict[str, Decimal]],
    read: ReadList,
    mapping: Callable[[object, str], Obj],
) -> dict[str, Decimal]:
    """The pod's effective requests (PodRequests): containers' aggregate, pod-level requests, overhead."""
    total = aggregate(containers, per_container)
    pod_level = mapping(spec.get("resources"), "spec.resources")
    if pod_level:
        pod_req = read(pod_level.get("requests"), "spec.resources.requests")
        for k, v in read(pod_level.get("limits"), "spec.resources.limits").items():
            # The limit stands in for a missing pod-level request when no container asks for that resource
            # (hugepages, which cannot be overcommitted, always).
            if k not in pod_req and (k not in total or k.startswith(HUGEPAGES_PREFIX)):
                pod_req[k] = v
        for k, v in pod_req.items():
            if pod_level_supported(k):
                total[k] = v
    _add(total, read(spec.get("overhead"), "spec.overhead"))
    return total
