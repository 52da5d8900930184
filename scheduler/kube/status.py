"""Status the scheduler writes back: PodGroup phase and conditions, Queue status, and the PodScheduled
condition plus a rate-limited Event on every pod it cannot place, so each pending pod has a reason.

A cycle per second must not turn into a write per object per second, so every writer compares what it
would write with the object's *current* status, from the informer's watch cache, and writes only what
differs. Comparing with what it last wrote instead would never repair a status someone else overwrote.
Until our own write has reached the cache (the cached resourceVersion is still the one we saw when we
wrote), the same write is not sent again.

Queue and PodGroup status is replaced whole (a JSON patch `add /status`): a merge patch would keep map keys
the new status no longer has. A condition keeps its `lastTransitionTime` while its status stays the same.

`StatusPublisher` hands each status the cycle publishes to its writer: Tessera's object when there is one,
else the KAI Scheduler object it was translated from (`kai_compat.py`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from scheduler.api.keys import GROUP, VERSION
from scheduler.api.meta import Condition
from scheduler.api.podgroup import PodGroupStatus
from scheduler.api.queue import QueueStatus
from scheduler.kube.binder import api_reason, finish
from scheduler.kube.informer import Informer
from scheduler.kube.kai_compat import KaiCompat
from scheduler.kube.recorder import EventRecorder, ObjectRef

log = logging.getLogger(__name__)

Obj = dict[str, Any]
# The object as the watch cache holds it, by informer key ("name" or "namespace/name"); None if unknown.
Lookup = Callable[[str], Obj | None]
JSON_PATCH = "application/json-patch+json"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rv(obj: Obj | None) -> str | None:
    return None if obj is None else (obj.get("metadata") or {}).get("resourceVersion")


class _InFlight:
    """Our writes not yet seen in the watch cache: key -> (what we wrote, the cached resourceVersion then)."""

    def __init__(self) -> None:
        self._writes: dict[str, tuple[Any, str | None]] = {}
        self._lock = threading.Lock()

    def pending(self, key: str, desired: Any, cached: Obj | None) -> bool:
        with self._lock:
            written = self._writes.get(key)
        return written is not None and written[0] == desired and written[1] == _rv(cached)

    def wrote(self, key: str, desired: Any, cached: Obj | None) -> None:
        with self._lock:
            self._writes[key] = (desired, _rv(cached))

    def forget(self, key: str) -> None:
        with self._lock:
            self._writes.pop(key, None)


def _conditions_key(conditions: list[Condition]) -> list[tuple[str, str, str, str]]:
    return [(c.type, c.status, c.reason, c.message) for c in conditions]


def _stamped(conditions: list[Condition], current: list[Condition]) -> list[Condition]:
    """`lastTransitionTime` carried over from the current condition of the same type and status."""
    since = {(c.type, c.status): c.last_transition_time for c in current}
    return [
        c.model_copy(update={"last_transition_time": since.get((c.type, c.status)) or _now()})
        if not c.last_transition_time
        else c
        for c in conditions
    ]


class PodGroupStatusWriter:
    def __init__(self, custom: client.CustomObjectsApi, current: Lookup) -> None:
        self.custom = custom
        self.current = current
        self._in_flight = _InFlight()

    def write(self, namespace: str, name: str, status: PodGroupStatus) -> bool:
        """Write `status` unless the PodGroup already has it; True when a write was sent and accepted."""
        key = f"{namespace}/{name}"
        cached = self.current(key)
        try:
            now = PodGroupStatus.model_validate((cached or {}).get("status") or {})
        except ValidationError:
            now = None  # malformed (someone else wrote it): ours replaces it
        desired = (status.phase, status.running, _conditions_key(status.conditions))
        if (
            now is not None
            and cached is not None
            and (now.phase, now.running, _conditions_key(now.conditions)) == desired
        ):
            return False
        if self._in_flight.pending(key, desired, cached):
            return False
        stamped = status.model_copy(
            update={"conditions": _stamped(status.conditions, now.conditions if now else [])}
        )
        body = [
            {"op": "add", "path": "/status", "value": stamped.model_dump(by_alias=True, exclude_none=True)}
        ]
        try:
            finish(
                self.custom.patch_namespaced_custom_object_status(
                    GROUP,
                    VERSION,
                    namespace,
                    "podgroups",
                    name,
                    body,
                    _content_type=JSON_PATCH,
                    _preload_content=False,
                )
            )
        except ApiException as exc:
            self._in_flight.forget(key)
            log.warning("could not write the status of PodGroup %s: %s", key, api_reason(exc))
            return False
        self._in_flight.wrote(key, desired, cached)
        return True


class QueueStatusWriter:
    def __init__(self, custom: client.CustomObjectsApi, current: Lookup) -> None:
        self.custom = custom
        self.current = current
        self._in_flight = _InFlight()

    def write(self, name: str, status: QueueStatus) -> bool:
        """Write `status` unless the Queue already has it; True when a write was sent and accepted."""
        cached = self.current(name)
        try:
            if cached is not None and QueueStatus.model_validate(cached.get("status") or {}) == status:
                return False
        except ValidationError:
            pass  # malformed (someone else wrote it): ours replaces it
        if self._in_flight.pending(name, status, cached):
            return False
        body = [{"op": "add", "path": "/status", "value": status.model_dump(by_alias=True)}]
        try:
            finish(
                self.custom.patch_cluster_custom_object_status(
                    GROUP, VERSION, "queues", name, body, _content_type=JSON_PATCH, _preload_content=False
                )
            )
        except ApiException as exc:
            self._in_flight.forget(name)
            log.warning("could not write the status of Queue %s: %s", name, api_reason(exc))
            return False
        self._in_flight.wrote(name, status, cached)
        return True


# Reasons that are a short turn rather than a failure: written on the pod only once they have lasted this
# long (a pod waiting for the device plugin to allocate the pod bound before it on the node it fits usually
# waits less than a second; writing it would double the requests per pod).
QUIET_S = {"WaitingForDevicePlugin": 30.0}


class PendingPodReporter:
    """Sets `PodScheduled=False, reason=Unschedulable` with the reason on the pod (as kube-scheduler does)
    and records a rate-limited Warning Event."""

    def __init__(self, core: client.CoreV1Api, recorder: EventRecorder, current: Lookup) -> None:
        self.core = core
        self.recorder = recorder
        self.current = current
        self._in_flight = _InFlight()
        self._quiet_since: dict[str, float] = {}  # pod uid -> when its quiet reason began (monotonic)

    def unschedulable(
        self, namespace: str, name: str, uid: str, message: str, *, reason: str = "Unschedulable"
    ) -> None:
        """`reason` is the cycle's code (Unschedulable, InvalidRequest, GangUnschedulable...): the Event's
        reason (FailedScheduling for plain Unschedulable, as kube-scheduler) and the condition message's prefix.
        A reason of QUIET_S is written only once it has lasted that long."""
        hold = QUIET_S.get(reason)
        if hold is not None:
            began = self._quiet_since.setdefault(uid, time.monotonic())
            if time.monotonic() - began < hold:
                return
        else:
            self._quiet_since.pop(uid, None)
        event_reason = "FailedScheduling" if reason == "Unschedulable" else reason
        ref = ObjectRef("Pod", namespace, name, uid)
        self.recorder.record(ref, event_reason, message, type_="Warning", rate_limited=True)
        text = message if reason == "Unschedulable" else f"{reason}: {message}"
        cached = self.current(f"{namespace}/{name}")
        if cached is not None and (cached.get("metadata") or {}).get("uid") != uid:
            cached = None  # a new pod of the same name: nothing to compare with
        scheduled = next(
            (
                c
                for c in ((cached or {}).get("status") or {}).get("conditions") or []
                if c.get("type") == "PodScheduled"
            ),
            None,
        )
        if scheduled and (scheduled.get("status"), scheduled.get("reason"), scheduled.get("message")) == (
            "False", "Unschedulable", text,
        ):  # fmt: skip
            return
        if self._in_flight.pending(uid, text, cached):
            return
        since = (
            scheduled.get("lastTransitionTime") if scheduled and scheduled.get("status") == "False" else None
        )
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": text,
            "lastTransitionTime": since or _now(),
        }
        try:
            # A strategic merge patch merges conditions by type: other conditions are kept.
            finish(
                self.core.patch_namespaced_pod_status(
                    name, namespace, {"status": {"conditions": [condition]}}, _preload_content=False
                )
            )
        except ApiException as exc:
            self._in_flight.forget(uid)
            if exc.status != 404:
                log.warning("could not set PodScheduled on %s/%s: %s", namespace, name, api_reason(exc))
            return
        self._in_flight.wrote(uid, text, cached)

    def forget(self, uid: str) -> None:
        self._in_flight.forget(uid)
        self._quiet_since.pop(uid, None)
        self.recorder.forget(uid)


class StatusPublisher:
    """The status of every Queue and PodGroup the cycle reports, and an emptied one for groups it no longer
    reports (`publish`)."""

    def __init__(
        self, custom: client.CustomObjectsApi, queues: Informer, groups: Informer, kai: KaiCompat | None
    ) -> None:
        self.queues, self.groups, self.kai = queues, groups, kai
        # The writers compare with the objects' current status in the watch caches.
        self.queue_status = QueueStatusWriter(custom, queues.get)
        self.group_status = PodGroupStatusWriter(custom, groups.get)

    def publish(self, queues: Mapping[str, QueueStatus], groups: Mapping[str, PodGroupStatus]) -> None:
        for name, status in queues.items():
            if self.queues.get(name) is not None:  # the implicit default queue has no object to write to
                self.queue_status.write(name, status)
            elif self.kai is not None:
                self.kai.write_queue_status(name, status)
        for key, group_status in groups.items():
            if self.groups.get(key) is not None:
                namespace, name = key.split("/", 1)
                self.group_status.write(namespace, name, group_status)
            elif self.kai is not None:
                self.kai.write_podgroup_status(key, group_status)
        for group in self.groups.snapshot():
            # The cycle reports only groups with pods: one whose pods are all gone runs nothing any more.
            meta = group.get("metadata") or {}
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            if key not in groups and _claims_pods(group):
                self.group_status.write(str(meta.get("namespace")), str(meta.get("name")), PodGroupStatus())
        if self.kai is not None:
            self.kai.reset_idle_groups(groups)


def _claims_pods(group: Obj) -> bool:
    """Whether a PodGroup's status says some of its pods run or why they wait."""
    status = group.get("status") or {}
    return bool(
        status.get("running") or status.get("conditions") or status.get("phase") not in (None, "Pending")
    )
