"""Kubernetes Events from the scheduler, aggregated and rate-limited.

A repeated (object, reason, message) bumps the existing Event's count instead of creating a new one, and
the same (object, reason) is not reported again within `min_interval_s` unless its message changed, so a
pod pending for an hour produces one Event with a count, not thousands. Failing to record never fails the
caller.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.kube.binder import finish

log = logging.getLogger(__name__)

COMPONENT = "tessera"


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = "v1"
    cluster_scoped: bool = False  # a Node or Queue: the Event lives in `namespace`, the object in none

    @classmethod
    def of(cls, obj: dict[str, Any]) -> ObjectRef:
        meta = obj.get("metadata") or {}
        return cls(
            kind=str(obj.get("kind") or "Pod"),
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name")),
            uid=str(meta.get("uid") or ""),
            api_version=str(obj.get("apiVersion") or "v1"),
        )


@dataclass
class _Sent:
    event_name: str
    message: str
    count: int
    at: float


class EventRecorder:
    def __init__(
        self,
        core: client.CoreV1Api,
        *,
        instance: str = "",
        min_interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.core = core
        self.instance = instance
        self.min_interval_s = min_interval_s
        self.clock = clock
        self._sent: dict[tuple[str, str, str], _Sent] = {}
        self._lock = threading.Lock()

    def record(
        self, ref: ObjectRef, reason: str, message: str, *, type_: str = "Normal", rate_limited: bool = False
    ) -> bool:
        """Post (or aggregate) an Event; returns False when it was suppressed or could not be written."""
        key = (ref.uid or f"{ref.namespace}/{ref.name}", ref.kind, reason)
        now = self.clock()
        with self._lock:
            sent = self._sent.get(key)
            if rate_limited and sent and sent.message == message and now - sent.at < self.min_interval_s:
                return False
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            if sent is not None and sent.message == message:
                count = sent.count + 1
                finish(
                    self.core.patch_namespaced_event(
                        sent.event_name,
                        ref.namespace,
                        {"count": count, "lastTimestamp": stamp},
                        _preload_content=False,
                    )
                )
                name = sent.event_name
            else:
                count, name = 1, f"{ref.name}.{time.time_ns():x}"
                finish(
                    self.core.create_namespaced_event(
                        ref.namespace,
                        self._event(ref, name, reason, message, type_, stamp),
                        _preload_content=False,
                    )
                )
        except ApiException as exc:
            if exc.status == 404 and sent is not None:  # the aggregated Event expired: start a new one
                with self._lock:
                    self._sent.pop(key, None)
                return self.record(ref, reason, message, type_=type_, rate_limited=rate_limited)
            log.warning("could not record event %s on %s/%s: %s", reason, ref.namespace, ref.name, exc.reason)
            return False
        with self._lock:
            self._sent[key] = _Sent(name, message, count, now)
        return True

    def warn(
        self,
        obj: dict[str, Any] | None,
        kind: str,
        namespace: str | None,
        name: str,
        reason: str,
        message: str,
    ) -> None:
        """A rate-limited Warning on the object a cycle's warning is about, as the watch cache has it (`obj`);
        an object not (or no longer) cached has nothing to carry it: the warning is only logged."""
        if obj is None:
            log.warning("%s %s: %s", kind, f"{namespace}/{name}" if namespace else name, message)
            return
        ref = ObjectRef.of({"kind": kind, **obj})
        self.record(
            ObjectRef(
                kind, namespace or "default", name, ref.uid, ref.api_version, cluster_scoped=not namespace
            ),
            reason,
            message,
            type_="Warning",
            rate_limited=True,
        )

    def forget(self, uid: str) -> None:
        """Drop aggregation state of an object that is gone."""
        with self._lock:
            for key in [k for k in self._sent if k[0] == uid]:
                del self._sent[key]

    def _event(
        self, ref: ObjectRef, name: str, reason: str, message: str, type_: str, stamp: str
    ) -> Any:  # a plain dict; the client serializes it as is
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ref.namespace},
            "involvedObject": {
                "apiVersion": ref.api_version,
                "kind": ref.kind,
                "namespace": "" if ref.cluster_scoped else ref.namespace,
                "name": ref.name,
                "uid": ref.uid,
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.instance,
        }
