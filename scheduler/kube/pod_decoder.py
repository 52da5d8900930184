"""Decoding the pod watch's JSON into only what the scheduler keeps of a pod.

A relist of 150,000 running pods is 150,000 objects of ~3 KB of JSON each, most of it what the scheduler
never reads: the containers' image, command, environment, mounts and probes, their statuses, the server's
managedFields. `json.loads` builds all of it and `informer.slim_pod` then throws it away (43 us a pod, two
thirds of a relist's time in the watch thread). msgspec decodes against a schema instead, in C, skipping
every field the schema does not name without building it (8 us a pod). The schema below names every field
of ObjectMeta, PodSpec and PodStatus (API v1.34, and those the Kubernetes client knows) except those
`slim_pod` drops, so `slim_pod` of its result is `slim_pod` of `json.loads`' (tests/kube/test_pod_decoder.py
checks it on every field the generators write). A field a later API version adds is not kept until it is
named here.

Anything the schema does not expect (a value of another type, an object that is not a pod: a watch's
ERROR status) falls back to `json.loads`: nothing is refused here that would have been read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypedDict

import msgspec

from scheduler.kube.informer import PodSlimmer, WatchTarget


class _Container(TypedDict, total=False):  # what `slim_pod` keeps of a container
    name: Any
    resources: Any
    ports: Any
    restartPolicy: Any


class _Meta(TypedDict, total=False):  # ObjectMeta without managedFields
    name: Any
    generateName: Any
    namespace: Any
    selfLink: Any
    uid: Any
    resourceVersion: Any
    generation: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    deletionGracePeriodSeconds: Any
    labels: Any
    annotations: Any
    ownerReferences: Any
    finalizers: Any


class _Spec(TypedDict, total=False):  # PodSpec without ephemeralContainers, containers as `_Container`
    volumes: Any
    initContainers: list[_Container]
    containers: list[_Container]
    restartPolicy: Any
    terminationGracePeriodSeconds: Any
    activeDeadlineSeconds: Any
    dnsPolicy: Any
    nodeSelector: Any
    serviceAccountName: Any
    serviceAccount: Any
    automountServiceAccountToken: Any
    nodeName: Any
    hostNetwork: Any
    hostPID: Any
    hostIPC: Any
    shareProcessNamespace: Any
    securityContext: Any
    imagePullSecrets: Any
    hostname: Any
    subdomain: Any
    affinity: Any
    schedulerName: Any
    tolerations: Any
    hostAliases: Any
    priorityClassName: Any
    priority: Any
    dnsConfig: Any
    readinessGates: Any
    runtimeClassName: Any
    enableServiceLinks: Any
    preemptionPolicy: Any
    overhead: Any
    topologySpreadConstraints: Any
    setHostnameAsFQDN: Any
    os: Any
    hostUsers: Any
    schedulingGates: Any
    resourceClaims: Any
    resources: Any
    hostnameOverride: Any
    schedulingGroup: Any  # (alpha: named by newer clients)
    evictionResponders: Any


class _Status(TypedDict, total=False):  # PodStatus without the containers' statuses, addresses, QoS class
    observedGeneration: Any
    phase: Any
    conditions: Any
    message: Any
    reason: Any
    nominatedNodeName: Any
    startTime: Any
    resize: Any
    resourceClaimStatuses: Any
    extendedResourceClaimStatus: Any
    allocatedResources: Any  # (named by newer clients)
    resources: Any
    nodeAllocatableResourceClaimStatuses: Any
    volumeHealth: Any


class _Pod(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    metadata: _Meta
    spec: _Spec
    status: _Status


class _PodList(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    metadata: Any  # resourceVersion, continue
    items: list[_Pod]


class _PodEvent(TypedDict, total=False):
    type: Any
    object: _Pod


_LIST = msgspec.json.Decoder(_PodList)
_EVENT = msgspec.json.Decoder(_PodEvent)


def decode_pod_list(data: bytes | str) -> Any:
    """A page of a pod list, its items as the scheduler keeps them (before `slim_pod`)."""
    try:
        return _LIST.decode(data)
    except msgspec.DecodeError:  # (a ValidationError too)
        return json.loads(data)


def decode_pod_event(line: bytes | str) -> Any:
    """A watch event of the pod watch; ERROR events (a Status, not a pod) and anything unexpected are
    decoded whole."""
    try:
        event = _EVENT.decode(line)
    except msgspec.DecodeError:  # (a ValidationError too)
        return json.loads(line)
    if event.get("type") == "ERROR":
        return json.loads(line)
    return event


def pod_watch(list_fn: Callable[..., Any]) -> WatchTarget:
    """The scheduler's pod watch over `list_fn` (the client's list of pods of all namespaces): decoded
    against the schema, kept as `slim_pod` keeps them."""
    return WatchTarget(
        "Pod", list_fn, transform=PodSlimmer(), decode_list=decode_pod_list, decode_event=decode_pod_event
    )
