"""Keeping each derived PodGroup equal to what its workload asks for, for as long as the workload lives.

The `GroupBook` says what every group should be; here each group handed over is compared with the
PodGroup in the cluster (the scheduler's PodGroup cache): created when missing (again, if deleted while
its pods live), patched when its spec differs (minMember grows as a startup-ordered workload's pods
appear, follows an HPA, a replica edit ...) or its owner reference is not its top owner's (the old top
owner was deleted leaving its dependents: the PodGroup is owned by the new one, so that it is garbage-
collected with it, never left without an owner). Only fields the podgrouper decides are written; a field
left unset (the grace period) keeps whatever the PodGroup says. Groups whose pods have all finished are
left alone.

A PodGroup deleted while its pods live is made again only if its owner still exists, read from the API
server: the garbage collector deletes it when its owner went (a JobSet deleted in the background, its
pods not yet gone), and making it again would only give the collector another one to delete.

A bare pod's PodGroup (`Decision.record`, as KAI's podgrouper makes one per bare pod, owned by the pod) is
written by a thread of its own: the scheduling cycle does not need it, so the loop never waits on it.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.api.keys import GROUP, POD_RECORD_LABEL, VERSION
from scheduler.kube import raw
from scheduler.kube.podgrouper.book import Decision, Group, GroupBook
from scheduler.kube.podgrouper.model import GroupSpec, Obj, OwnerRef

log = logging.getLogger(__name__)

REPATCH_AFTER_S = 2.0  # the same write is not sent again before the PodGroup cache could have seen it
Written = tuple[
    Literal["ADDED", "MODIFIED"], dict[str, Any]
]  # ("ADDED" | "MODIFIED", the PodGroup as the API server returned it)


def patch_for(desired: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that makes `current` say what `desired` says: fields desired unset are left alone,
    except preemptibility (its label was removed, so the group no longer overrides the priority's rule)."""
    patch = {k: v for k, v in desired.items() if v is not None and current.get(k) != v}
    if desired.get("preemptibility") is None and current.get("preemptibility") is not None:
        patch["preemptibility"] = None
    return patch


def owner_refs(g: GroupSpec) -> list[dict[str, Any]]:
    return list(g.to_podgroup()["metadata"].get("ownerReferences") or [])


def _owned_by(current: Mapping[str, Any]) -> set[str]:
    refs = (current.get("metadata") or {}).get("ownerReferences") or []
    return {str(r.get("uid")) for r in refs if isinstance(r, Mapping)}


# (namespace, the group's owner) -> whether it exists now (read from the API server, not a cache): True,
# False (gone, or being deleted), or None when that cannot be told.
OwnerAlive = Callable[[str, OwnerRef], bool | None]


class PodGroupReconciler:
    def __init__(
        self,
        custom: client.CustomObjectsApi,
        book: GroupBook,
        existing: Callable[[str], Obj | None],
        *,
        owner_alive: OwnerAlive = lambda _ns, _owner: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.custom = custom
        self.book = book
        self.existing = existing
        self.owner_alive = owner_alive
        self.clock = clock
        self._sent: dict[str, tuple[dict[str, Any], float]] = {}  # key -> last spec written, when
        self._deleted: set[str] = (
            set()
        )  # groups whose PodGroup was deleted (made again only for a live owner)
        self.records = RecordWriter(custom)

    # ---- what the adapter reports ------------------------------------------------------------------------
    def observe(self, pod: Obj) -> Decision:
        decision = self.book.observe(pod)
        if decision.record is not None:
            self.records.want(decision.record)
        return decision

    def forget(self, pod: Obj) -> None:
        self.book.forget(pod)
        self.records.forget(pod)

    def owner_changed(self, obj: Obj) -> None:
        self.book.owner_changed(obj)

    def podgroup_changed(self, key: str, deleted: bool = False) -> None:
        """A PodGroup event: compare the group again (re-create it if deleted, undo an edit of its spec)."""
        if deleted:
            self._sent.pop(key, None)
            self._deleted.add(key)
        self.book.touch(key)

    def stop(self) -> None:
        self.records.stop()

    # ---- writing -----------------------------------------------------------------------------------------
    def flush(self) -> list[Written]:
        """Write every group that differs from the cluster; returns what was written. Bare pods' records
        are handed to their writer (which works on its own)."""
        out: list[Written] = []
        for group in self.book.take_pending():
            written = self._apply(group)
            if written is not None:
                out.append(written)
        self.records.flush()
        return out

    def _apply(self, group: Group) -> Written | None:
        g = group.spec
        if not group.live:
            return None  # nothing left to schedule: no group to create or correct
        desired, now = g.spec_fields(), self.clock()
        current = self.existing(g.key)
        sent = self._sent.get(g.key)
        if current is None:
            if sent is not None:
                return None  # written, not in the cache yet
            gone = g.key in self._deleted and g.owner is not None
            if gone and g.owner is not None and self.owner_alive(g.namespace, g.owner) is False:
                log.info("podgrouper: PodGroup %s not made again: its %s %s is gone", g.key,
                         g.owner.kind, g.owner.name)  # fmt: skip
                return None
            self._deleted.discard(g.key)
            return self._create(g, now)
        patch = patch_for(desired, current.get("spec") or {})
        refs = owner_refs(g) if g.owner is not None and _owned_by(current) != {g.owner.uid} else None
        if not patch and refs is None:
            return None
        if refs is None and sent is not None and sent[0] == desired and now - sent[1] < REPATCH_AFTER_S:
            return None
        return self._patch(g, patch, now, refs)

    def _create(self, g: GroupSpec, now: float) -> Written | None:
        resp: Any
        try:
            resp = self.custom.create_namespaced_custom_object(
                GROUP, VERSION, g.namespace, "podgroups", g.to_podgroup(), _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 409:  # it exists (made before a restart): compared once the cache has it
                self._sent[g.key] = ({}, now)
                self.book.touch(g.key)
                self._unrecord(g)
            else:
                log.warning("could not create PodGroup %s: %s %s", g.key, exc.status, exc.reason)
            return None
        self._sent[g.key] = (g.spec_fields(), now)
        log.info("podgrouper: created PodGroup %s (%s, minMember %d)", g.key, g.rule, g.min_member)
        return "ADDED", json.loads(resp.data)

    def _unrecord(self, g: GroupSpec) -> None:
        """The PodGroup that exists may be a bare pod's record (its pod now needs a real group, a
        preemptibility added to its labels): without the record label the scheduler's watch sees it."""
        try:
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, g.namespace, "podgroups", g.name,
                                                       {"metadata": {"labels": {POD_RECORD_LABEL: None}}})  # fmt: skip
        except ApiException as exc:
            log.warning("could not update PodGroup %s: %s %s", g.key, exc.status, exc.reason)

    def _patch(
        self, g: GroupSpec, patch: dict[str, Any], now: float, refs: list[dict[str, Any]] | None = None
    ) -> Written | None:
        body: dict[str, Any] = {"spec": patch}
        if refs is not None:  # its top owner changed: owned by the new one (garbage-collected with it)
            body["metadata"] = {"ownerReferences": refs}
        resp: Any
        try:
            resp = self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, g.namespace, "podgroups", g.name, body, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404:  # deleted meanwhile: create it again
                self._sent.pop(g.key, None)
                self.book.touch(g.key)
            else:
                log.warning("could not update PodGroup %s: %s %s", g.key, exc.status, exc.reason)
            return None
        self._sent[g.key] = (g.spec_fields(), now)
        owner = f", now owned by {g.owner.kind} {g.owner.name}" if refs is not None and g.owner else ""
        log.info("podgrouper: updated PodGroup %s (%s): %s%s", g.key, g.rule, patch, owner)
        return "MODIFIED", json.loads(resp.data)


class RecordWriter:
    """Writes bare pods' PodGroups (owned by the pod, so the garbage collector removes each with its pod) on
    a thread of its own, in the order the pods came. `want` notes one (any thread); `flush` hands what is
    noted to the thread (called by the leader only: a standby writes nothing); one whose pod is gone is
    not written, one that exists already (a restart) is refused by the API server. Each carries the
    `tessera.dev/pod-record` label, which the scheduler's own PodGroup watch leaves out: the cycle never
    needs them, and so never pays for their events."""

    def __init__(self, custom: client.CustomObjectsApi) -> None:
        self.custom = custom
        self._lock = threading.Lock()
        self._noted: dict[str, GroupSpec] = {}  # key -> spec, not yet handed to the thread
        self._handed: dict[
            str, str
        ] = {}  # key -> its pod's uid, handed to the thread (written, or about to be)
        self._queue: queue.Queue[GroupSpec | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.written = 0  # for tests and logs

    def want(self, g: GroupSpec) -> None:
        with self._lock:
            if g.key not in self._handed:
                self._noted[g.key] = g

    def forget(self, pod: Obj) -> None:
        """The pod is gone: its record is not written (the garbage collector removes a written one)."""
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        with self._lock:
            for key in [k for k, g in self._noted.items() if g.owner is not None and g.owner.uid == uid]:
                del self._noted[key]
            for key in [k for k, owner in self._handed.items() if owner == uid]:
                del self._handed[key]

    def flush(self) -> None:
        with self._lock:
            noted, self._noted = list(self._noted.values()), {}
            self._handed.update((g.key, g.owner.uid if g.owner else "") for g in noted)
            if noted and self._thread is None:
                self._thread = threading.Thread(target=self._run, name="podgrouper-records", daemon=True)
                self._thread.start()
        for g in noted:
            self._queue.put(g)

    def stop(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=10)

    def _run(self) -> None:
        while (g := self._queue.get()) is not None:
            with self._lock:
                if g.key not in self._handed:
                    continue  # its pod went meanwhile
            body = g.to_podgroup()
            body["metadata"]["labels"] = {POD_RECORD_LABEL: "true"}
            path = f"/apis/{GROUP}/{VERSION}/namespaces/{quote(g.namespace, safe='')}/podgroups"
            try:
                # Without the generated client's model layer (raw.py): one of these per bare pod.
                raw.request(self.custom.api_client, "POST", path, body)
                self.written += 1
            except ApiException as exc:
                if exc.status not in (404, 409):  # 409: it exists; 404: its namespace is being deleted
                    log.warning("could not create PodGroup %s: %s %s", g.key, exc.status, exc.reason)
            except Exception as exc:  # the writer must outlive a bad answer
                log.warning("could not create PodGroup %s: %s", g.key, exc)
