"""The podgrouper's memory: which pods are in which group, and what each group should be now.

A group is decided (`grouper.py`) again when one of its pods changes what a rule may read (joins, leaves,
runs, becomes Ready, finishes), when an owner in its chain changes (`owner_changed`: an HPA scaling an
elastic PyTorchJob, a replica count edited, a JobSet step completing) or when its PodGroup changes; once
per `take_pending`, however many events came. A pod's group name never changes once decided.

Members are all the pods seen in a group, finished ones included: a rule may count them (a JobSet step
whose pods all succeeded), and the adapter keeps the group on a finished pod so that stale-gang eviction
counts a member that succeeded. A pod whose group is of itself alone (minMember 1) is its own job
and is not put in a group, unless it must carry what a pod cannot (a preemptibility, a grace period): the
group's queue and priority class are handed back to be put on the pod the cycle sees. A bare pod's group
is still written as an object, as KAI's podgrouper writes one (`Decision.record`: for tools that list
PodGroups; the cycle does not need it).

A pod's group name never changes once decided, with one exception: when the group's top owner has left
the chain (deleted with `--cascade=orphan`, which leaves its dependents running, or re-parented), the
group keeps its name and its pods, and takes the new top owner (its rule, and its ownership, so the
PodGroup is garbage-collected with it rather than left without an owner for ever).

No API calls here beyond the owner reads of the lookup given; `reconciler.py` writes the PodGroups.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.api.priority import DEFAULT_PRIORITY_CLASS
from scheduler.kube.podgrouper.grouper import group_for_pod
from scheduler.kube.podgrouper.model import (
    GroupSpec,
    Obj,
    Reader,
    Workload,
    is_finished,
    is_ready,
    is_terminating,
    meta,
    spec,
    uid_of,
)
from scheduler.kube.podgrouper.names import group_name
from scheduler.kube.podgrouper.policy import queue_of
from scheduler.kube.podgrouper.walk import Chain, OwnerLookup, owner_chain


@dataclass(frozen=True)
class Decision:
    group: str | None  # the pod's group name (None: the pod is its own job)
    warnings: tuple[str, ...] = ()  # to report on the pod (only when they changed)
    # A pod that is its own job but whose group says more than the pod: the queue and priority class to
    # give it (the adapter writes them on the pod the cycle sees), so no PodGroup object is needed.
    queue: str | None = None
    priority_class: str | None = None
    # A bare pod's own group, to be written as a PodGroup object owned by the pod (KAI writes one per bare
    # pod; tools that list PodGroups expect it). Only a record: the cycle takes the pod as its own job.
    record: GroupSpec | None = None


@dataclass
class Group:
    spec: GroupSpec
    members: dict[str, Obj] = field(default_factory=dict)  # pod uid -> latest pod

    @property
    def live(self) -> bool:
        """Some member may still be scheduled (neither finished nor being deleted)."""
        return any(not is_finished(p) and not is_terminating(p) for p in self.members.values())


def own_job(pod: Obj, g: GroupSpec) -> Decision | None:
    """For a group of this pod alone (its own PodGroup, minMember 1: a bare pod, a Deployment's replica, an
    Argo step) that needs no PodGroup object, what the cycle must see on the pod: the group's queue and
    priority class where they differ from the pod's own. None: the group needs its object (a gang, or a
    preemptibility or grace period, which a pod cannot carry)."""
    if not (
        g.min_member == 1
        and g.owner is not None
        and g.owner.uid == uid_of(pod)
        and g.name == group_name(str(meta(pod).get("name") or ""), uid_of(pod))
        and g.preemptibility is None
        and g.stale_grace_s is None
    ):
        return None
    own_priority = spec(pod).get("priorityClassName") or DEFAULT_PRIORITY_CLASS
    priority = g.priority_class or DEFAULT_PRIORITY_CLASS
    return Decision(
        None,
        queue=g.queue if g.queue != queue_of(Workload(pod), {}) else None,
        priority_class=priority if priority != own_priority else None,
    )


def _state(pod: Obj | None) -> tuple[Any, ...]:
    """What of a pod a rule may read: a change of anything else (a new resourceVersion, a condition's
    timestamp) decides nothing again."""
    if pod is None:
        return ()
    m = meta(pod)
    return (
        m.get("labels"),
        m.get("annotations"),
        m.get("ownerReferences"),
        bool(m.get("deletionTimestamp")),
        (pod.get("status") or {}).get("phase"),
        is_ready(pod),
        spec(pod).get("priorityClassName"),
    )


class GroupBook:
    def __init__(
        self,
        lookup: OwnerLookup,
        *,
        reader: Reader = lambda _ns, _av, _kind, _name: None,
        priority_class_exists: Callable[[str], bool] = lambda _name: True,
    ) -> None:
        self.lookup = lookup
        self.reader = reader
        self.priority_class_exists = priority_class_exists
        self._groups: dict[str, Group] = {}  # "namespace/name" -> group
        self._pod_group: dict[str, str | None] = {}  # pod uid -> group key (None: its own job)
        # pod uid -> (last pod seen, its decision) for pods that are their own job
        self._alone: dict[str, tuple[Obj, Decision]] = {}
        self._warned: dict[str, tuple[str, ...]] = {}
        self._by_owner: dict[str, set[str]] = {}  # owner uid -> group keys whose chain holds it
        self._pending: set[str] = set()  # groups to decide again and compare with the cluster
        self._lock = threading.Lock()

    # ---- changes -----------------------------------------------------------------------------------------
    def observe(self, pod: Obj) -> Decision:
        """A pod of ours was added or changed: its group, and warnings not reported yet.

        A pod's first event finds its group (the walk and the rule, without the members); later events only
        update the membership. The group itself is decided once per `take_pending`, over all its members,
        so a burst of pods joining a large group costs one decision, not one per pod."""
        uid = uid_of(pod)
        with self._lock:
            key = self._pod_group.get(uid)
            group = self._groups.get(key) if key else None
            if group is not None:
                if _state(group.members.get(uid)) != _state(pod):
                    self._pending.add(group.spec.key)
                group.members[uid] = pod
                return Decision(group.spec.name)
            alone = self._alone.get(uid)
            if alone is not None and _state(alone[0]) == _state(pod):
                self._alone[uid] = (pod, alone[1])
                return alone[1]
        g, _ = self._decide(pod, with_members=False)
        with self._lock:
            warnings = self._new_warnings(uid, g)
            own = Decision(None) if g is None or g.explicit else own_job(pod, g)
            if own is not None and g is not None and not g.explicit and not meta(pod).get("ownerReferences"):
                own = replace(own, record=g)
            if own is not None or g is None:
                self._pod_group[uid] = None
                self._alone[uid] = (pod, own or Decision(None))
                return replace(own or Decision(None), warnings=warnings)
            self._alone.pop(uid, None)
            self._pod_group[uid] = g.key
            group = self._groups.get(g.key)
            if group is None:
                group = self._groups[g.key] = Group(g)
            group.members[uid] = pod
            self._pending.add(g.key)
            return Decision(g.name, warnings)

    def forget(self, pod: Obj) -> None:
        """A pod was deleted."""
        uid = uid_of(pod)
        with self._lock:
            self._warned.pop(uid, None)
            self._alone.pop(uid, None)
            key = self._pod_group.pop(uid, None)
            group = self._groups.get(key) if key else None
            if group is None or key is None:
                return
            group.members.pop(uid, None)
            if group.members:
                self._pending.add(key)  # a rule may count who is left (an MPI launcher, an LWS leader)
                return
            del self._groups[key]
            for owner_uid in [o for o, keys in self._by_owner.items() if key in keys]:
                self._by_owner[owner_uid].discard(key)
                if not self._by_owner[owner_uid]:
                    del self._by_owner[owner_uid]

    def owner_changed(self, obj: Obj) -> None:
        """An object in some groups' owner chains changed (called from informer threads)."""
        with self._lock:
            self._pending |= self._by_owner.get(uid_of(obj), set())

    def touch(self, key: str) -> None:
        """Hand `key` to the next `take_pending` (its PodGroup must be checked again)."""
        with self._lock:
            if key in self._groups:
                self._pending.add(key)

    # ---- reading -----------------------------------------------------------------------------------------
    def take_pending(self) -> list[Group]:
        """Every group changed since the last call (a member, an owner, its PodGroup), decided again."""
        with self._lock:
            pending, self._pending = self._pending, set()
        out = []
        for key in sorted(pending):
            group = self._redecide(key)
            if group is not None:
                out.append(group)
        return out

    def group(self, key: str) -> Group | None:
        with self._lock:
            return self._groups.get(key)

    def group_of(self, pod_uid: str) -> str | None:
        with self._lock:
            key = self._pod_group.get(pod_uid)
            group = self._groups.get(key) if key else None
            return group.spec.name if group else None

    # ---- deciding ----------------------------------------------------------------------------------------
    def _decide(self, pod: Obj, *, with_members: bool) -> tuple[GroupSpec | None, Chain]:
        chain = owner_chain(pod, self.lookup)
        namespace = str(meta(pod).get("namespace") or "default")

        def members(name: str) -> list[Obj]:
            if not with_members:
                return []  # finding the group's name: the members only count for its minMember
            with self._lock:
                group = self._groups.get(f"{namespace}/{name}")
                return list(group.members.values()) if group else []

        g = group_for_pod(
            pod, chain, members=members, priority_class_exists=self.priority_class_exists, reader=self.reader
        )
        if g is not None and not g.explicit:
            with self._lock:
                for owner in chain.owners:
                    if uid_of(owner):
                        self._by_owner.setdefault(uid_of(owner), set()).add(g.key)
        return g, chain

    def _redecide(self, key: str) -> Group | None:
        with self._lock:
            group = self._groups.get(key)
            live = [p for p in (group.members.values() if group else ()) if not is_terminating(p)]
        if group is None:
            return None
        if live:
            running = [p for p in live if not is_finished(p)]
            g, chain = self._decide((running or live)[-1], with_members=True)
            if g is not None and g.key == key:
                with self._lock:
                    group.spec = g
            elif g is not None and _adopted(group.spec, g, chain):
                with self._lock:  # same name and pods; the new top owner's rule and ownership
                    group.spec = replace(g, name=group.spec.name)
                    self._by_owner.setdefault(g.owner.uid if g.owner else "", set()).add(key)
        return group

    def _new_warnings(self, uid: str, g: GroupSpec | None) -> tuple[str, ...]:
        warnings = g.warnings if g is not None else ()
        if self._warned.get(uid, ()) == warnings:
            return ()
        self._warned[uid] = warnings
        return warnings


def _adopted(old: GroupSpec, new: GroupSpec, chain: Chain) -> bool:
    """Whether `new` (decided for a member of the group `old`, under another name) is the group's new top
    owner: the old top owner is no longer in the member's (completely read) chain of owners."""
    if new.explicit or old.owner is None or new.owner is None or not chain.complete:
        return False
    in_chain = {uid_of(o) for o in chain.owners}
    return old.owner.uid not in in_chain and new.owner.uid != old.owner.uid and old.owner.kind != "Pod"
