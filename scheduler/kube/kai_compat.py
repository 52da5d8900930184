"""`--kai-compat`: KAI Scheduler's Queue and PodGroup objects, watched and handed to the cycle as Tessera's.

Each KAI object is translated (`scheduler.api.kai`) into the Tessera object the cycle knows; its status is
written back in KAI's shape. What the translation could not carry over (a field Tessera does not use yet,
a KAI default that blocks pods) is a Warning event on the KAI object, recorded by the leader only.

One rule when Tessera's and KAI's object share a name (Queue) or namespace/name (PodGroup): **Tessera's is
used**, the KAI one is ignored for as long as Tessera's exists, and a `KaiObjectShadowed` Warning event on
the KAI object says so. Deleting Tessera's object hands the name to the KAI one at once. The rule is
decided from the two watch caches when events are drained, so it needs no state that a rebuild could lose:
whatever order the events come in, after a drain the cycle holds Tessera's object if it exists, else
KAI's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from kubernetes import client
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from scheduler.api.kai import (
    KAI_PODGROUP_API_VERSION,
    KAI_QUEUE_API_VERSION,
    kai_podgroup_status,
    kai_queue_status,
    translate,
)
from scheduler.api.keys import API_VERSION, KAI_GROUP, KAI_PODGROUP_VERSION, KAI_QUEUE_VERSION
from scheduler.api.podgroup import PodGroupStatus
from scheduler.api.queue import QueueStatus
from scheduler.cache.cluster import WatchEvent
from scheduler.cache.containment import one_line
from scheduler.kube.binder import api_reason
from scheduler.kube.event_queue import ResourceEvent
from scheduler.kube.informer import Informer, WatchTarget, slim
from scheduler.kube.recorder import EventRecorder, ObjectRef
from scheduler.webhook.admission import QueueKind, QueueLookup

log = logging.getLogger(__name__)

Obj = dict[str, Any]
KaiKind = Literal["KaiQueue", "KaiPodGroup"]
KAI_KINDS: tuple[KaiKind, ...] = ("KaiQueue", "KaiPodGroup")
_NATIVE: dict[str, Literal["Queue", "PodGroup"]] = {"KaiQueue": "Queue", "KaiPodGroup": "PodGroup"}
_KAI: dict[str, KaiKind] = {"Queue": "KaiQueue", "PodGroup": "KaiPodGroup"}
_API_VERSION = {"KaiQueue": KAI_QUEUE_API_VERSION, "KaiPodGroup": KAI_PODGROUP_API_VERSION}
SHADOWED, INVALID, TRANSLATED = "KaiObjectShadowed", "KaiObjectInvalid", "KaiObjectTranslated"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KaiCompat:
    kinds = KAI_KINDS

    def __init__(self, custom: client.CustomObjectsApi, recorder: EventRecorder) -> None:
        self.custom = custom
        self.recorder = recorder
        self.informers: Mapping[str, Informer] = {}
        self._lock = threading.Lock()
        # (KAI kind, key) -> {reason: message}: what is wrong with each KAI object now; and what was recorded.
        self._warnings: dict[tuple[str, str], dict[str, str]] = {}
        self._recorded: dict[tuple[str, str, str], str] = {}
        self._written: dict[tuple[str, str], Any] = {}  # (KAI kind, key) -> (status sent, cached rv)

    # ---- watching ----------------------------------------------------------------------------------------
    def targets(self) -> list[WatchTarget]:
        list_fn = self.custom.list_cluster_custom_object
        return [
            WatchTarget("KaiQueue", list_fn, (KAI_GROUP, KAI_QUEUE_VERSION, "queues"), transform=slim),
            WatchTarget(
                "KaiPodGroup", list_fn, (KAI_GROUP, KAI_PODGROUP_VERSION, "podgroups"), transform=slim
            ),
        ]

    def attach(self, informers: Mapping[str, Informer]) -> None:
        """The adapter's informers, Tessera's kinds and KAI's (the shadowing rule reads both caches)."""
        self.informers = informers

    def translate(self, ev: ResourceEvent, out: list[WatchEvent]) -> None:
        """A KAI informer event into the Tessera event the cycle should see (appended to `out`), if any."""
        native = _NATIVE[ev.kind]
        key = ev.key
        if self.informers[native].get(key) is not None:
            if ev.type == "DELETED":
                self._set(ev.kind, key, None)
            else:
                self._set(ev.kind, key, {SHADOWED: _shadow_message(native, key)})
            return
        if ev.type == "DELETED":
            self._set(ev.kind, key, None)
            meta = ev.obj.get("metadata") or {}
            out.append(
                WatchEvent(native, "DELETED", {"apiVersion": API_VERSION, "kind": native, "metadata": meta})
            )
            return
        try:
            t = translate(ev.obj)
        except ValueError as exc:  # a KAI object Tessera cannot use: the cycle keeps what it had
            self._set(ev.kind, key, {INVALID: f"not used by Tessera: {one_line(exc)}"})
            return
        self._set(ev.kind, key, {TRANSLATED: "; ".join(t.notes)} if t.notes else {})
        out.append(WatchEvent(native, ev.type, t.obj))

    def after_native(self, ev: ResourceEvent, out: list[WatchEvent]) -> None:
        """After Tessera's Queue/PodGroup event was forwarded: the KAI object of the same name is shadowed
        by it, or takes over when it is deleted."""
        kai_kind = _KAI[ev.kind]
        kai_obj = self.informers[kai_kind].get(ev.key)
        if kai_obj is None:
            return
        if ev.type == "DELETED":
            self.translate(ResourceEvent(kai_kind, "ADDED", kai_obj), out)
        else:
            self._set(kai_kind, ev.key, {SHADOWED: _shadow_message(ev.kind, ev.key)})

    def find(self, kind: str, key: str) -> Obj | None:
        """The KAI object a Tessera kind/key was translated from (for warnings about it)."""
        kai_kind = _KAI.get(kind)
        if kai_kind is None or kai_kind not in self.informers:
            return None
        return self.informers[kai_kind].get(key)

    # ---- warnings ----------------------------------------------------------------------------------------
    def _set(self, kind: str, key: str, warnings: dict[str, str] | None) -> None:
        with self._lock:
            if warnings is None:
                self._warnings.pop((kind, key), None)
                for k in [k for k in self._recorded if k[:2] == (kind, key)]:
                    del self._recorded[k]
                return
            if self._warnings.get((kind, key)) != warnings:
                for message in warnings.values():
                    log.warning("KAI %s %s: %s", _NATIVE[kind], key, message)
                for k in [k for k in self._recorded if k[:2] == (kind, key) and k[2] not in warnings]:
                    del self._recorded[k]
            self._warnings[(kind, key)] = warnings

    def flush_warnings(self) -> None:
        """Record a Warning event for each KAI-object problem not recorded yet (called by the leader)."""
        with self._lock:
            todo = [
                (kind, key, reason, message)
                for (kind, key), reasons in self._warnings.items()
                for reason, message in reasons.items()
                if message and self._recorded.get((kind, key, reason)) != message
            ]
        for kind, key, reason, message in todo:
            obj = self.informers[kind].get(key)
            if obj is None:
                continue
            meta = obj.get("metadata") or {}
            namespace = meta.get("namespace")
            ref = ObjectRef(_NATIVE[kind], namespace or "default", str(meta.get("name")),
                            str(meta.get("uid") or ""), _API_VERSION[kind], cluster_scoped=not namespace)  # fmt: skip
            if self.recorder.record(ref, reason, message, type_="Warning"):
                with self._lock:
                    self._recorded[(kind, key, reason)] = message

    # ---- status, in KAI's shape --------------------------------------------------------------------------
    # As Tessera's own writers (scheduler/kube/status.py): what would be written is compared with the
    # object's status in the watch cache, and a write not yet seen there is not sent again. Unlike them, a
    # merge patch of only the fields Tessera owns: KAI's controllers, if they run, keep theirs.
    def write_queue_status(self, name: str, status: QueueStatus) -> bool:
        cached = self.informers["KaiQueue"].get(name)
        if cached is None:
            return False
        children = [
            object_name(q)
            for kind in ("Queue", "KaiQueue")
            for q in self.informers[kind].snapshot()
            if (q.get("spec") or {}).get("parentQueue") == name
        ]
        body = kai_queue_status(status, children)

        def send(patch: Obj) -> Any:
            return self.custom.patch_cluster_custom_object_status(
                KAI_GROUP, KAI_QUEUE_VERSION, "queues", name, patch, _preload_content=False
            )

        return self._write("KaiQueue", name, cached, body, send)

    def write_podgroup_status(self, key: str, status: PodGroupStatus) -> bool:
        cached = self.informers["KaiPodGroup"].get(key)
        if cached is None:
            return False
        namespace, name = key.split("/", 1)
        previous = (cached.get("status") or {}).get("schedulingConditions")
        body = kai_podgroup_status(status, previous, _now())

        def send(patch: Obj) -> Any:
            return self.custom.patch_namespaced_custom_object_status(
                KAI_GROUP, KAI_PODGROUP_VERSION, namespace, "podgroups", name, patch, _preload_content=False
            )

        return self._write("KaiPodGroup", key, cached, body, send)

    def reset_idle_groups(self, reported: Mapping[str, PodGroupStatus]) -> None:
        """A KAI PodGroup the cycle no longer reports (its pods are gone) keeps no scheduling condition."""
        for group in self.informers["KaiPodGroup"].snapshot():
            meta = group.get("metadata") or {}
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            if key in reported or self.informers["PodGroup"].get(key) is not None:
                continue
            if (group.get("status") or {}).get("schedulingConditions"):
                self.write_podgroup_status(key, PodGroupStatus())

    def _write(self, kind: str, key: str, cached: Obj, body: Obj, send: Callable[[Obj], Any]) -> bool:
        current = cached.get("status") or {}
        if all(current.get(field) == value for field, value in body.items()):
            return False
        rv = (cached.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            if self._written.get((kind, key)) == (body, rv):
                return False  # sent already; the watch has not shown it yet
            self._written[(kind, key)] = (body, rv)
        try:
            send({"status": body})  # a merge patch: None removes a field
        except ApiException as exc:
            with self._lock:
                self._written.pop((kind, key), None)
            log.warning("could not write the status of KAI %s %s: %s", _NATIVE[kind], key, api_reason(exc))
            return False
        return True

    # ---- the webhook -------------------------------------------------------------------------------------
    def queue_lookup(self) -> QueueLookup:
        """`name -> "leaf" | "parent" | None` over Tessera's and KAI's Queues together (the webhook's check)."""

        def kind(name: str) -> QueueKind | None:
            native, kai = self.informers["Queue"], self.informers["KaiQueue"]
            if native.get(name) is None and kai.get(name) is None:
                return None
            used = {object_name(q): q for q in kai.snapshot()}
            used.update({object_name(q): q for q in native.snapshot()})  # Tessera's wins a shared name
            is_parent = any((q.get("spec") or {}).get("parentQueue") == name for q in used.values())
            return "parent" if is_parent else "leaf"

        return kind


def object_name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name"))


def _shadow_message(native: str, key: str) -> str:
    return (
        f"Tessera's {native} {key} ({API_VERSION}) has the same name: it is used, and this KAI {native} is "
        "ignored while it exists (docs/kai-compat.md)"
    )


def access_problem(custom: client.CustomObjectsApi) -> str | None:
    """Why the scheduler could not watch KAI's kinds (not served, or not allowed), in one line; None when it
    can, or when the API server cannot be asked now (the informers retry)."""
    for version, plural in ((KAI_QUEUE_VERSION, "queues"), (KAI_PODGROUP_VERSION, "podgroups")):
        try:
            resp: Any = custom.list_cluster_custom_object(
                KAI_GROUP, version, plural, limit=1, _preload_content=False, _request_timeout=(5, 15)
            )
            resp.release_conn()
        except ApiException as exc:
            if exc.status == 404:
                return (
                    f"the API server serves no {plural}.{KAI_GROUP}/{version}: install KAI Scheduler's CRDs "
                    "(docs/kai-compat.md) or run without --kai-compat"
                )
            if exc.status == 403:
                return f"not allowed to list {plural}.{KAI_GROUP}: the chart grants it with kaiCompat.enabled=true"
            return None
        except (OSError, HTTPError):
            return None
    return None
