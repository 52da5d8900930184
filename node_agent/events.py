"""Kubernetes Events written by the agent: on pods (over-limit reports, kills) and on its node (GPU health)."""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from node_agent.oneline import first_line

log = logging.getLogger(__name__)
COMPONENT = "tessera-agent"


@dataclass(frozen=True)
class ObjectRef:
    """What an event is about: a pod (namespaced) or the node (cluster-scoped, namespace "")."""

    namespace: str
    name: str
    uid: str | None = None
    kind: str = "Pod"


PodRef = ObjectRef


def node_ref(name: str) -> ObjectRef:
    return ObjectRef(namespace="", name=name, kind="Node")


class EventSink(Protocol):
    def emit(self, pod: ObjectRef, reason: str, message: str, *, warning: bool = True) -> None: ...


class LogEvents:
    """Events as log lines only (no cluster)."""

    def emit(self, pod: ObjectRef, reason: str, message: str, *, warning: bool = True) -> None:
        log.log(
            logging.WARNING if warning else logging.INFO,
            "%s/%s %s: %s",
            pod.namespace,
            pod.name,
            reason,
            message,
        )


class KubeEvents:
    """core/v1 Events on the pod, so `kubectl describe pod` shows them."""

    def __init__(self, core_api: Any, node: str) -> None:
        self._api = core_api
        self._node = node
        self._host = node or socket.gethostname()

    def emit(self, pod: ObjectRef, reason: str, message: str, *, warning: bool = True) -> None:
        from kubernetes import client

        now = datetime.now(UTC)
        # Events about cluster-scoped objects (the node) live in "default", as the kubelet's do.
        namespace = pod.namespace or "default"
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{pod.name}.", namespace=namespace),
            involved_object=client.V1ObjectReference(
                kind=pod.kind, api_version="v1", namespace=pod.namespace or None, name=pod.name, uid=pod.uid
            ),
            reason=reason,
            message=message,
            type="Warning" if warning else "Normal",
            source=client.V1EventSource(component=COMPONENT, host=self._host),
            reporting_component=COMPONENT,
            reporting_instance=f"{COMPONENT}-{self._node}",
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        LogEvents().emit(pod, reason, message, warning=warning)
        try:
            self._api.create_namespaced_event(namespace, event, _preload_content=False, _request_timeout=10)
        except Exception as exc:  # an event that cannot be written must not stop enforcement
            log.warning(
                "cannot write event %s on pod %s/%s: %s", reason, pod.namespace, pod.name, first_line(exc)
            )
