"""Keeping each derived PodGroup equal to what its workload asks for, for as long as the workload lives.

The `GroupBook` says what every group should be; here each group handed over is compared with the
PodGroup in the cluster (the scheduler's PodGroup cache): created when missing (again, if deleted while
its pods live), patched when its spec differs (minMember grows as a startup-ordered workload's pods
appear, follows an HPA, a replica edit ...). Only fields the podgrouper decides are written; a field left
unset (the grace period) keeps whatever the PodGroup says. Groups whose pods have all finished are left
alone.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.api.keys import GROUP, VERSION
from scheduler.kube.podgrouper.book import Decision, Group, GroupBook
from scheduler.kube.podgrouper.model import GroupSpec, Obj

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


class PodGroupReconciler:
    def __init__(
        self,
        custom: client.CustomObjectsApi,
        book: GroupBook,
        existing: Callable[[str], Obj | None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.custom = custom
        self.book = book
        self.existing = existing
        self.clock = clock
        self._sent: dict[str, tuple[dict[str, Any], float]] = {}  # key -> last spec written, when

    # ---- what the adapter reports ------------------------------------------------------------------------
    def observe(self, pod: Obj) -> Decision:
        return self.book.observe(pod)

    def forget(self, pod: Obj) -> None:
        self.book.forget(pod)

    def owner_changed(self, obj: Obj) -> None:
        self.book.owner_changed(obj)

    def podgroup_changed(self, key: str, deleted: bool = False) -> None:
        """A PodGroup event: compare the group again (re-create it if deleted, undo an edit of its spec)."""
        if deleted:
            self._sent.pop(key, None)
        self.book.touch(key)

    # ---- writing -----------------------------------------------------------------------------------------
    def flush(self) -> list[Written]:
        """Write every group that differs from the cluster; returns what was written."""
        out: list[Written] = []
        for group in self.book.take_pending():
            written = self._apply(group)
            if written is not None:
                out.append(written)
        return out

    def _apply(self, group: Group) -> Written | None:
        g = group.spec
        if not group.live:
            return None  # nothing left to schedule: no group to create or correct
        desired, now = g.spec_fields(), self.clock()
        current = self.existing(g.key)
        sent = self._sent.get(g.key)
        if current is None:
            return self._create(g, now) if sent is None else None  # else: not in the cache yet
        patch = patch_for(desired, current.get("spec") or {})
        if not patch or (sent is not None and sent[0] == desired and now - sent[1] < REPATCH_AFTER_S):
            return None
        return self._patch(g, patch, now)

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
            else:
                log.warning("could not create PodGroup %s: %s %s", g.key, exc.status, exc.reason)
            return None
        self._sent[g.key] = (g.spec_fields(), now)
        log.info("podgrouper: created PodGroup %s (%s, minMember %d)", g.key, g.rule, g.min_member)
        return "ADDED", json.loads(resp.data)

    def _patch(self, g: GroupSpec, patch: dict[str, Any], now: float) -> Written | None:
        resp: Any
        try:
            resp = self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, g.namespace, "podgroups", g.name, {"spec": patch}, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404:  # deleted meanwhile: create it again
                self._sent.pop(g.key, None)
                self.book.touch(g.key)
            else:
                log.warning("could not update PodGroup %s: %s %s", g.key, exc.status, exc.reason)
            return None
        self._sent[g.key] = (g.spec_fields(), now)
        log.info("podgrouper: updated PodGroup %s (%s): %s", g.key, g.rule, patch)
        return "MODIFIED", json.loads(resp.data)
