"""Status the scheduler writes back: PodGroup phase and conditions, Queue status, and the PodScheduled
condition plus a rate-limited Event on every pod it cannot place, so each pending pod has a reason.

Every writer remembers what it last wrote and skips unchanged writes: a cycle per second must not turn
into a write per object per second.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.api.keys import GROUP, VERSION
from scheduler.api.podgroup import PodGroupStatus
from scheduler.api.queue import QueueStatus
from scheduler.kube.binder import api_reason
from scheduler.kube.recorder import EventRecorder, ObjectRef

log = logging.getLogger(__name__)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Dedup:
    def __init__(self) -> None:
        self._last: dict[str, Any] = {}
        self._lock = threading.Lock()

    def changed(self, key: str, value: Any) -> bool:
        with self._lock:
            if self._last.get(key) == value:
                return False
            self._last[key] = value
            return True

    def forget(self, key: str) -> None:
        with self._lock:
            self._last.pop(key, None)


class PodGroupStatusWriter:
    def __init__(self, custom: client.CustomObjectsApi) -> None:
        self.custom = custom
        self._dedup = _Dedup()

    def write(self, namespace: str, name: str, status: PodGroupStatus) -> bool:
        key = f"{namespace}/{name}"
        if not self._dedup.changed(key, status):
            return False
        stamped = [
            c if c.last_transition_time else c.model_copy(update={"last_transition_time": _now()})
            for c in status.conditions
        ]
        body = {
            "status": status.model_copy(update={"conditions": stamped}).model_dump(
                by_alias=True, exclude_none=True
            )
        }
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, "podgroups", name, body, _preload_content=False
            )
        except ApiException as exc:
            self._dedup.forget(key)
            log.warning("could not write the status of PodGroup %s: %s", key, api_reason(exc))
            return False
        return True


class QueueStatusWriter:
    def __init__(self, custom: client.CustomObjectsApi) -> None:
        self.custom = custom
        self._dedup = _Dedup()

    def write(
        self,
        name: str,
        status: QueueStatus,
    ) -> bool:
        if not self._dedup.changed(name, status):
            return False
        try:
            self.custom.patch_cluster_custom_object_status(
                GROUP,
                VERSION,
                "queues",
                name,
                {"status": status.model_dump(by_alias=True)},
                _preload_content=False,
            )
        except ApiException as exc:
            self._dedup.forget(name)
            log.warning("could not write the status of Queue %s: %s", name, api_reason(exc))
            return False
        return True


class PendingPodReporter:
    """Sets `PodScheduled=False, reason=Unschedulable` with the reason on the pod (as kube-scheduler does)
    and records a rate-limited Warning Event."""

    def __init__(self, core: client.CoreV1Api, recorder: EventRecorder) -> None:
        self.core = core
        self.recorder = recorder
        self._dedup = _Dedup()

    def unschedulable(
        self, namespace: str, name: str, uid: str, message: str, *, reason: str = "Unschedulable"
    ) -> None:
        """`reason` is the cycle's code (Unschedulable, InvalidRequest, GangUnschedulable...): the Event's
        reason (FailedScheduling for plain Unschedulable, as kube-scheduler) and the condition message's prefix."""
        event_reason = "FailedScheduling" if reason == "Unschedulable" else reason
        ref = ObjectRef("Pod", namespace, name, uid)
        self.recorder.record(ref, event_reason, message, type_="Warning", rate_limited=True)
        text = message if reason == "Unschedulable" else f"{reason}: {message}"
        if not self._dedup.changed(uid, text):
            return
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": text,
            "lastTransitionTime": _now(),
        }
        try:
            # A strategic merge patch merges conditions by type: other conditions are kept.
            self.core.patch_namespaced_pod_status(
                name, namespace, {"status": {"conditions": [condition]}}, _preload_content=False
            )
        except ApiException as exc:
            self._dedup.forget(uid)
            if exc.status != 404:
                log.warning("could not set PodScheduled on %s/%s: %s", namespace, name, api_reason(exc))

    def forget(self, uid: str) -> None:
        self._dedup.forget(uid)
        self.recorder.forget(uid)
