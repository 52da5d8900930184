"""The ledger: who holds what, kept in one place and changed by one primitive.

A holding is a placement held by a pod (bound by us, or seen running from the watch) or reserved for a
pod being moved (`scheduler/cache/reservations.py`). Every change, whoever makes it (watch events, the actions'
transactions, commit), is one `_swap` of the holding under a key: it writes the cluster arrays, the table
of holdings and tells the usage listeners (the job index's per-queue usage, the open session's queue
tree), together. While a transaction is open the old value is journalled, so `rollback` undoes any
number of changes with one loop, newest first, and every piece of bookkeeping moves back together
(KAI Scheduler's `framework/statement.go` does the same with an undo per operation).

Kinds: `BOUND` pods, `ASSUMED` pods, `RESERVED` places and `RELEASING` victims. The arrays are the plan:
a pod placed by the cycle whose bind is still in flight is `ASSUMED` (in the arrays and charged as if
bound; a binder's outcome confirms it, `confirm`, or it is released). A victim that was evicted but whose
pod is still terminating (its grace period) holds nothing in them any more, its capacity is promised to
the pod it made room for, but it still occupies its GPU. So it is kept apart, `RELEASING`, charged to
nobody: a placement that needs what it still occupies is not bound but pipelined (a reservation that
waits for it, `physical_shortfall`), and bound once its pod is gone (KAI Scheduler's Releasing and
Pipelined pod states).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Protocol

from scheduler.cache.reservations import Reservation
from scheduler.model.frozen import frozen_for_the_checker
from scheduler.model.types import Placement, PodInfo
from scheduler.state.cluster_state import ClusterState, OvercommitError

log = logging.getLogger(__name__)


class HoldKind(StrEnum):
    BOUND = "bound"  # a pod holding resources on its node
    ASSUMED = "assumed"  # a pod placed by the cycle whose bind is in flight (charged as if bound)
    RESERVED = "reserved"  # the planned place of a pod being moved or pipelined (keyed by namespace/name)
    RELEASING = "releasing"  # an evicted pod still terminating: busy on its GPU, not in the arrays

    @property
    def in_arrays(self) -> bool:
        """Whether the holding is written into the cluster arrays (the plan)."""
        return self is not HoldKind.RELEASING


@frozen_for_the_checker  # (model/frozen.py: one per running pod)
class Owner:
    """Whom a holding is charged to: a queue, on behalf of a job."""

    queue: str
    job: str
    nonpreemptible: bool = False


@frozen_for_the_checker
class Holding:
    kind: HoldKind
    placement: Placement
    owner: Owner | None = None  # None: charged to nobody (pods of other schedulers, or not indexed yet)
    reservation: Reservation | None = None  # what a RESERVED place waits for


def same_charge(old: Holding | None, new: Holding | None) -> bool:
    """Whether replacing `old` by `new` leaves every charge as it was (same kind, owner and placement)."""
    return (
        old is not None
        and new is not None
        and old.placement is new.placement
        and (old.kind, old.owner) == (new.kind, new.owner)
    )


class UsageListener(Protocol):
    def changed(self, old: Holding | None, new: Holding | None) -> None:
        """A holding was replaced (None: there was none, or there is none now)."""
        ...

    def arrived(self, holdings: list[Holding]) -> None:
        """Holdings came where there were none (`changed(None, h)` for each: a relist's, in one call)."""
        ...


class PodListener(Protocol):
    def moved(self, key: str, old: Holding | None, new: Holding | None) -> None:
        """What `key` (a pod's uid, or a reserved place's namespace/name) holds was replaced (a holding
        only re-owned, the same place and kind, is not told: `Ledger.reown`)."""
        ...

    def arrived(self, items: list[tuple[str, Holding]]) -> None:
        """Pods' holdings came where they held nothing (`moved(key, None, h)` for each, in one call)."""
        ...


# A journal entry: which table, which key, what it held before (None: nothing).
_Entry = tuple[dict[str, Holding], str, Holding | None]


@dataclass(frozen=True, slots=True)
class Shortfall:
    """What a placement needs that releasing pods still occupy, and which of them it waits for."""

    waits_for: frozenset[str]  # uids of the releasing pods

    def __bool__(self) -> bool:
        return bool(self.waits_for)


class Ledger:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.pods: dict[str, Holding] = {}  # by pod uid
        self.reserved: dict[str, Holding] = {}  # by the moved or pipelined pod's namespace/name
        self.releasing: dict[str, Holding] = {}  # evicted pods still terminating, by uid
        self._listeners: list[UsageListener] = []
        self._pod_listeners: list[PodListener] = []  # told which pod moved (scheduler/cache/pod_topology.py)
        self._journal: list[_Entry] | None = None  # open while a transaction is
        # Pods the open transaction told the cluster to bind: an abort keeps their places (see `abort`).
        self._bound: dict[str, None] = {}  # in bind order
        # Bumped by every change (a rollback's too): what was read of the holdings since is still true
        # while it is the same (the session's job facts are kept on it).
        self.changes = 0

    # --------------------------------------------------------------------------------- the primitive
    def _swap(
        self, table: dict[str, Holding], key: str, new: Holding | None, *, arrays: bool = True,
        moved: bool = True,
    ) -> Holding | None:  # fmt: skip
        """Replace what `key` holds with `new`: arrays, table and listeners together; journalled while a
        transaction is open. Raises OvercommitError (changing nothing) when `new` does not fit. `moved=False`:
        only its owner changes (same place, same kind), which the pod listeners do not read."""
        self.changes += 1
        old = table.get(key)
        was = old.placement if old is not None and old.kind.in_arrays else None
        now = new.placement if new is not None and new.kind.in_arrays else None
        if arrays and was is not now and was != now:  # (a re-owned holding keeps its placement object)
            if was is not None:
                self._write(was, -1, key)
            if now is not None:
                try:
                    self.state.write(now, +1)
                except OvercommitError:
                    if was is not None:
                        self.state.write(was, +1)
                    raise
        if new is None:
            del table[key]
        else:
            table[key] = new
        if self._journal is not None:
            self._journal.append((table, key, old))
        for listener in self._listeners:
            listener.changed(old, new)
        if moved:
            for pod_listener in self._pod_listeners:
                pod_listener.moved(key, old, new)
        return old

    def _write(self, placement: Placement, sign: int, key: str) -> None:
        try:
            self.state.write(placement, sign)
        except OvercommitError as exc:  # the node changed under the holding; never let it stop the books
            log.error("release of %s failed: %s", key, exc)

    # ------------------------------------------------------------------------------------ operations
    def hold(self, uid: str, placement: Placement, owner: Owner | None = None) -> None:
        """Pod `uid` holds `placement` (placed by us, or found running). Raises OvercommitError."""
        self._swap(self.pods, uid, Holding(HoldKind.BOUND, placement, owner))

    def hold_many(self, items: Mapping[str, Placement]) -> None:
        """`hold` for many pods at once (by uid), the arrays written in one array program (a relist). All
        or nothing: raises OvercommitError, changing nothing, when one of them does not fit."""
        table = self.pods
        if not table.keys().isdisjoint(items):
            for uid, pl in items.items():  # some are held already: one by one, each replacing the last
                self.hold(uid, pl)
            return
        self.state.write_many(list(items.values()))
        # What `_swap` does for each, once for all: none of them held anything, so nothing is uncounted.
        held = {uid: Holding(HoldKind.BOUND, pl) for uid, pl in items.items()}
        table.update(held)
        self.changes += len(held)
        if self._journal is not None:
            self._journal.extend((table, uid, None) for uid in held)
        if self._listeners:
            holdings = list(held.values())
            for listener in self._listeners:
                listener.arrived(holdings)
        if self._pod_listeners:
            pairs = list(held.items())
            for pod_listener in self._pod_listeners:
                pod_listener.arrived(pairs)

    def release(self, uid: str, *, arrays: bool = True) -> Holding | None:
        """Pod `uid` holds nothing any more (finished, deleted, or gone after its eviction). `arrays=False`:
        its node's row is being wiped anyway (the node is gone)."""
        if uid in self.releasing:
            self._swap(self.releasing, uid, None, arrays=arrays)
        if uid not in self.pods:
            return None
        return self._swap(self.pods, uid, None, arrays=arrays)

    def bound(self, uid: str) -> None:
        """The cluster was told to bind pod `uid` (it holds its place already): a bound pod cannot be
        unbound, so an `abort` of the open transaction keeps its place."""
        if self._journal is not None:
            self._bound[uid] = None

    def assume(self, uid: str) -> None:
        """Pod `uid`'s bind is in flight: its holding stays (same place, same owner) as ASSUMED."""
        old = self.pods.get(uid)
        if old is not None and old.kind is HoldKind.BOUND:
            self._swap(self.pods, uid, replace(old, kind=HoldKind.ASSUMED))

    def confirm(self, uid: str) -> bool:
        """Pod `uid`'s bind succeeded: an ASSUMED holding becomes BOUND. Whether it was assumed."""
        old = self.pods.get(uid)
        if old is None or old.kind is not HoldKind.ASSUMED:
            return False
        self._swap(self.pods, uid, replace(old, kind=HoldKind.BOUND))
        return True

    def start_releasing(self, uid: str) -> Holding | None:
        """Pod `uid` was evicted (or is being deleted): its place leaves the plan, the pod stays on its GPU
        until it is gone (`release`). Returns what it held."""
        held = self.pods.get(uid)
        if held is None:
            return None
        self._swap(self.pods, uid, None)
        self._swap(self.releasing, uid, replace(held, kind=HoldKind.RELEASING))
        return held

    def stop_releasing(self, uid: str) -> None:
        """The eviction of `uid` was refused: it holds its place again. Raises OvercommitError."""
        held = self.releasing.get(uid)
        if held is not None:
            self._swap(self.releasing, uid, None)
            self._swap(self.pods, uid, replace(held, kind=HoldKind.BOUND))

    def physical_shortfall(self, placement: Placement) -> Shortfall:
        """The releasing pods `placement` (held, about to be bound) waits for: those on a GPU (or node) that
        would be over-full if it were bound now. What is on the GPUs is what bound pods and releasing pods
        hold; reserved places are in the plan but nobody is on them yet. Empty when it can be bound now."""
        if not self.releasing:
            return Shortfall(frozenset())
        s, row = self.state, placement.node
        here = [(uid, h.placement) for uid, h in self.releasing.items() if h.placement.node == row]
        if not here:
            return Shortfall(frozenset())
        kept = [h.placement for h in self.reserved.values() if h.placement.node == row]
        waits: set[str] = set()
        for share in placement.gpus:
            on_gpu = [(uid, g) for uid, pl in here for g in pl.gpus if g.slot == share.slot]
            empty = [g for pl in kept for g in pl.gpus if g.slot == share.slot]  # planned, nobody there yet
            free_milli = int(s.free_milli[row, share.slot]) + sum(g.milli for g in empty)
            free_mib = int(s.free_mib[row, share.slot]) + sum(g.mib for g in empty)
            if sum(g.milli for _, g in on_gpu) > free_milli or sum(g.mib for _, g in on_gpu) > free_mib:
                waits.update(uid for uid, _ in on_gpu)
        cpu = sum(pl.cpu_milli for _, pl in here)
        mem = sum(pl.memory_mib for _, pl in here)
        free_cpu = int(s.free_cpu[row]) + sum(pl.cpu_milli for pl in kept)
        free_mem = int(s.free_mem[row]) + sum(pl.memory_mib for pl in kept)
        if (placement.cpu_milli and cpu > free_cpu) or (placement.memory_mib and mem > free_mem):
            waits.update(uid for uid, _ in here)
        return Shortfall(frozenset(waits))

    def resize(self, uid: str, placement: Placement) -> None:
        """Pod `uid` holds `placement` instead (the same GPUs, their MiB filled in once its node's GPU memory
        became known), keeping its kind and owner. Raises OvercommitError, changing nothing."""
        for table in (self.pods, self.releasing):
            old = table.get(uid)
            if old is not None and old.placement != placement:
                self._swap(table, uid, replace(old, placement=placement))

    def reown(self, uid: str, owner: Owner | None) -> None:
        """Charge pod `uid`'s holding to `owner` from now on (its job was rebuilt)."""
        old = self.pods.get(uid)
        if (
            old is not None and old.owner != owner
        ):  # (the constructor: `replace` costs 3x, 150,000 x a relist)
            # Where it is and how (placement, kind) stay: the pod listeners have nothing to recount (the first
            # session after a relist re-owns every running pod).
            self._swap(self.pods, uid, Holding(old.kind, old.placement, owner, old.reservation), moved=False)

    def reserve(self, res: Reservation) -> None:
        """Keep `res.placement` for the pod `res.pod_key` being moved. Raises OvercommitError."""
        owner = Owner(res.queue, f"pod:{res.pod_key}")
        self._swap(self.reserved, res.pod_key, Holding(HoldKind.RESERVED, res.placement, owner, res))

    def unreserve(self, pod_key: str, *, arrays: bool = True) -> Reservation | None:
        """Give a reserved place back (claimed, lapsed or its node gone)."""
        if pod_key not in self.reserved:
            return None
        old = self._swap(self.reserved, pod_key, None, arrays=arrays)
        return old.reservation if old is not None else None

    def forget_row(self, row: int) -> list[str]:
        """Drop every holding on `row` without writing the arrays (the node is gone and its row wiped);
        returns the pod uids that held something there."""
        uids = [uid for uid, h in self.pods.items() if h.placement.node == row]
        for uid in uids:
            self.release(uid, arrays=False)
        for key in [k for k, h in self.reserved.items() if h.placement.node == row]:
            self.unreserve(key, arrays=False)
        for uid in [u for u, h in self.releasing.items() if h.placement.node == row]:
            self._swap(self.releasing, uid, None, arrays=False)
        return uids

    # ---------------------------------------------------------------------------------- transactions
    def begin(self) -> int:
        """Open the journal (if not open yet); the checkpoint to roll back to."""
        if self._journal is None:
            self._journal = []
        return len(self._journal)

    def checkpoint(self) -> int:
        return len(self._journal) if self._journal is not None else 0

    def rollback(self, checkpoint: int) -> None:
        """Undo every change after `checkpoint`, newest first."""
        journal = self._journal
        if journal is None:
            return
        self._journal = None  # the undo itself is not history
        try:
            while len(journal) > checkpoint:
                table, key, old = journal.pop()
                self._swap(table, key, old)
        finally:
            self._journal = journal

    def commit(self) -> None:
        """Close the journal: what was done stays done."""
        self._journal = None
        self._bound.clear()

    def abort(self) -> list[Holding] | None:
        """Undo a transaction left open (an action failed half-way), except the places of the pods it had
        the cluster bind (they are bound: their assignment says where). None when no transaction was open;
        else the places of bound pods that could not be taken again (the caller keeps GPU pods off their
        nodes until the watch brings the binds)."""
        if self._journal is None:
            return None
        kept = {uid: self.pods[uid] for uid in self._bound if uid in self.pods}
        self.rollback(0)
        self.commit()
        lost: list[Holding] = []
        for uid, held in kept.items():
            if uid in self.pods:
                continue
            try:
                self.hold(uid, held.placement, held.owner)
            except OvercommitError:
                lost.append(held)
        return lost

    # --------------------------------------------------------------------------------------- reading
    def add_listener(self, listener: UsageListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: UsageListener) -> None:
        self._listeners.remove(listener)

    def add_pod_listener(self, listener: PodListener) -> None:
        self._pod_listeners.append(listener)

    def __contains__(self, uid: object) -> bool:
        return uid in self.pods

    def on_node(self, pod: PodInfo) -> bool:
        """Whether `pod` is on a node: the watch shows it bound, or this scheduler bound it (its place is
        held here: ASSUMED while the bind is in flight, BOUND once answered) before the watch shows it."""
        return pod.holds_resources or pod.uid in self.pods

    def node_name(self, held: Holding) -> str | None:
        """The name of the node a holding is on."""
        return self.state.node_names[held.placement.node]

    def placement(self, uid: str) -> Placement | None:
        held = self.pods.get(uid)
        return held.placement if held is not None else None

    def reservations(self) -> dict[str, Reservation]:
        """The reserved places' records, by the moved pod's namespace/name."""
        return {key: h.reservation for key, h in self.reserved.items() if h.reservation is not None}

    def fingerprint(self) -> int:
        """A hash of who holds what where: equal layouts, equal fingerprints."""
        return hash(
            frozenset((uid, h.placement) for uid, h in self.pods.items())
            | frozenset((("reserved", key), h.placement) for key, h in self.reserved.items())
            | frozenset((("releasing", uid), h.placement) for uid, h in self.releasing.items())
        )
