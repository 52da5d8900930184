"""The node bind locks as the scheduling cycle should see them.

A node whose bind lock is held by a GPU pod the device plugin has not served yet cannot take another GPU
pod until it is freed. When the lock is someone else's (another scheduler, or one from before a restart),
the adapter shows such a node with a `tessera.dev/bind-lock:NoSchedule` taint: placement then goes to free
nodes instead of planning binds that are bound to fail, and the taint goes away as soon as the watch shows
the holder allocated (or gone, or the lock stale). A lock this scheduler took is not shown: its binder
queues the next binds of that node behind it. Judged from the watch caches only: no API request.
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from scheduler.api.bind_lock import BindLock, allocation_confirmed
from scheduler.api.keys import BIND_LOCK
from scheduler.kube.informer import Informer

LOCK_TAINT = {"key": BIND_LOCK, "value": "", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Holder:
    uid: str
    key: str  # namespace/name
    age_s: float
    ours: bool  # taken by this process (the watch may not show the pod bound yet)


class NodeLockView:
    def __init__(self, nodes: Informer, pods: Informer, timeout_s: float) -> None:
        self.nodes, self.pods, self.timeout_s = nodes, pods, timeout_s
        self._taken: dict[str, tuple[str, str, float]] = {}  # node -> (uid, key, monotonic time), by us
        self._shown: set[str] = set()  # nodes the cycle currently sees tainted
        # Locks of ours the watch has shown on their node: once the node shows it gone, the device plugin freed
        # it (only the scheduler and the node's own components may write a node's annotations, users may not).
        self._seen: set[tuple[str, str]] = set()  # (node, pod uid)
        self._lock = threading.Lock()

    def taken(self, node: str, uid: str, key: str, *, shown: bool = False) -> None:
        """We took `node`'s lock for pod `uid`; `shown` when the running cycle was told at once."""
        with self._lock:
            self._taken[node] = (uid, key, time.monotonic())
            if shown:
                self._shown.add(node)

    def pod_gone(self, uid: str) -> None:
        """A pod we took a lock for was deleted: it will never be allocated."""
        with self._lock:
            for node in [n for n, taken in self._taken.items() if taken[0] == uid]:
                del self._taken[node]
                self._seen.discard((node, uid))

    def reset_shown(self) -> None:
        """The cycle's state was rebuilt: it has seen no node tainted yet."""
        with self._lock:
            self._shown.clear()

    def forget(self, node: str) -> None:
        with self._lock:
            taken = self._taken.pop(node, None)
            self._shown.discard(node)
            if taken is not None:
                self._seen.discard((node, taken[0]))

    def holder(self, node: str, node_obj: dict[str, Any] | None = None) -> Holder | None:
        """The pod holding the node's lock and not yet served, or None when the lock is free."""
        with self._lock:
            taken = self._taken.get(node)
        obj = node_obj if node_obj is not None else self.nodes.get(node)
        raw = (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(BIND_LOCK)
        if taken is not None and self._freed_on_node(node, taken, raw):
            taken = None
        candidate: Holder | None = None
        if taken is not None:
            candidate = Holder(taken[0], taken[1], time.monotonic() - taken[2], ours=True)
        else:
            if raw:
                try:
                    lock = BindLock.from_annotation(raw)
                except ValueError:
                    return None  # malformed: the binder takes it over
                candidate = Holder(
                    lock.uid,
                    f"{lock.namespace}/{lock.name}",
                    lock.age_seconds(datetime.now(UTC)),
                    ours=False,
                )
        if candidate is None or candidate.age_s >= self.timeout_s or self._served(candidate, node):
            if taken is not None:
                with self._lock:
                    if self._taken.get(node) == taken:
                        del self._taken[node]
                    self._seen.discard((node, taken[0]))
            return None
        return candidate

    def _freed_on_node(self, node: str, taken: tuple[str, str, float], raw: str | None) -> bool:
        """Whether our lock for `taken`'s pod, once shown on the node by the watch, is gone from it now: the
        device plugin served the pod and removed it (the kubelet's container statuses may come later)."""
        try:
            on_node = BindLock.from_annotation(raw).uid if raw else None
        except ValueError:
            on_node = None
        key = (node, taken[0])
        with self._lock:
            if on_node == taken[0]:
                self._seen.add(key)
                return False
            if key not in self._seen or self._taken.get(node) != taken:
                return False  # not shown yet: the watch may still be behind our own write
            self._seen.discard(key)
            del self._taken[node]
            return True

    def _served(self, holder: Holder, node: str) -> bool:
        pod = self.pods.get(holder.key)
        if pod is None:
            return not holder.ours  # ours may simply not be in the cache yet
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        return (
            meta.get("uid") != holder.uid
            or allocation_confirmed(pod)  # a gpu-allocated mark alone may be the pod user's own
            or bool(meta.get("deletionTimestamp"))
            or (pod.get("status") or {}).get("phase") != "Pending"
            or (not holder.ours and spec.get("nodeName") != node)
        )

    def shown_tainted(self, name: str, node_obj: dict[str, Any]) -> bool:
        """Whether the cycle sees the node tainted now, or should from this version of it."""
        with self._lock:
            if name in self._shown:
                return True
        return self._foreign(self.holder(name, node_obj))

    @staticmethod
    def _foreign(holder: Holder | None) -> bool:
        """Shown tainted: a lock we took ourselves is not (our binder queues the next binds behind it)."""
        return holder is not None and not holder.ours

    def waiting(self, node: str, uid: str) -> str | None:
        """Why a GPU pod `uid` cannot be bound to `node` now, or None."""
        holder = self.holder(node)
        if holder is None or holder.uid == uid:
            return None
        return f"node {node} is busy: waiting for the device plugin to allocate {holder.key}"

    def decorate(self, node_obj: dict[str, Any]) -> dict[str, Any]:
        """The node as the cycle should see it (tainted while locked)."""
        name = str((node_obj.get("metadata") or {}).get("name"))
        locked = self._foreign(self.holder(name, node_obj))
        with self._lock:
            (self._shown.add if locked else self._shown.discard)(name)
        if not locked:
            return node_obj
        out = dict(node_obj)
        spec = copy.deepcopy(node_obj.get("spec") or {})
        spec["taints"] = [*(spec.get("taints") or []), dict(LOCK_TAINT)]
        out["spec"] = spec
        return out

    def refresh(self) -> list[dict[str, Any]]:
        """Nodes whose lock state changed since the cycle last saw them, as it should now see them."""
        with self._lock:
            names = self._shown | set(self._taken)
            shown = set(self._shown)
        changed = []
        for name in sorted(names):
            obj = self.nodes.get(name)
            if obj is None:
                self.forget(name)
                continue
            if self._foreign(self.holder(name, obj)) != (name in shown):
                changed.append(self.decorate(obj))
        return changed


def only_lock_changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether two versions of a node differ only in their bind lock (and the bookkeeping of any write)."""
    if old is None:
        return False
    if {k: v for k, v in old.items() if k != "metadata"} != {k: v for k, v in new.items() if k != "metadata"}:
        return False
    skip = ("resourceVersion", "managedFields", "annotations")
    a, b = old.get("metadata") or {}, new.get("metadata") or {}
    if {k: v for k, v in a.items() if k not in skip} != {k: v for k, v in b.items() if k not in skip}:
        return False
    other_a = {k: v for k, v in (a.get("annotations") or {}).items() if k != BIND_LOCK}
    other_b = {k: v for k, v in (b.get("annotations") or {}).items() if k != BIND_LOCK}
    return other_a == other_b
