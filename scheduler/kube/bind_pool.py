"""Binds carried out by worker threads while the scheduling cycle goes on.

As kube-scheduler's binding cycle (or KAI's BindRequest handed to its binder): the cycle decides, assumes
the placement and hands the API requests over; the next cycle learns each outcome. Binds that take the
same node's bind lock go one after the other (a gang may put several pods on one node): a bind waits in
line (`park`) until the device plugin has served the pod holding the lock, and the adapter lets it go
(`release`) once the watch shows the lock free.

`AsyncBinds` is the adapter's side (`KubeCluster.bind`): it decides from the watch caches what it can (is the
node's bind lock held? does this pod need it?), hands the API requests to the `BindPool` and returns at once;
each outcome is handed to the next cycle by `outcomes`, and a failed bind also re-sends the pod as the API
has it (unbound), so whatever the cycle assumed is undone. Until the watch shows a pod bound, `shown_at`
says where the watch translation should show it. The bind lock is taken only where the device plugin needs
it to recognise the pod: fractional pods, and whole-GPU pods on nodes served by Tessera's device plugin (the
node advertises `tessera.dev/gpu-slice`) when it serves whole GPUs too (`whole_gpu_lock`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import BIND_LOCK, GPU_SLICE_RESOURCE
from scheduler.cache.cluster import BindError, BindOutcome
from scheduler.cache.cluster import BindResult as Accepted
from scheduler.kube.binder import Binder, BindResult
from scheduler.kube.event_queue import EventQueue, ResourceEvent
from scheduler.kube.lock_view import NodeLockView
from scheduler.kube.volume_prebind import VolumePrebind
from scheduler.model.reasons import Reason
from scheduler.model.types import PodInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BindTask:
    namespace: str
    name: str
    uid: str
    node: str
    assignment: GPUAssignment | None
    lock: bool  # take the node's bind lock first
    since: float = field(default_factory=time.monotonic)
    claims: tuple[str, ...] = ()  # the pod's PersistentVolumeClaims (volume_prebind.py acts on them first)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


Work = Callable[[BindTask], BindResult]
Done = Callable[[BindTask, BindResult], None]
# An object as the watch cache holds it, by informer key ("name" or "namespace/name"); None if unknown.
Lookup = Callable[[str], dict[str, Any] | None]


class BindPool:
    def __init__(self, work: Work, done: Done, *, workers: int = 8) -> None:
        self._work, self._done = work, done
        self._queue: deque[BindTask] = deque()
        self._parked: dict[str, deque[BindTask]] = {}  # node -> binds waiting for its lock, in order
        self._busy = 0  # tasks being worked on
        self._cond = threading.Condition()
        self._stopping = False
        self._workers = max(1, workers)
        self._threads: list[threading.Thread] = []  # started with the first bind

    # ---- the cycle's side -----------------------------------------------------------------------------------
    def submit(self, task: BindTask) -> None:
        with self._cond:
            if not self._threads and not self._stopping:
                self._threads = [threading.Thread(target=self._run, name=f"binder-{i}", daemon=True)
                                 for i in range(self._workers)]  # fmt: skip
                for t in self._threads:
                    t.start()
            self._queue.append(task)
            self._cond.notify()

    def park(self, task: BindTask) -> None:
        """Hold `task` until its node's bind lock is free (`release`)."""
        with self._cond:
            self._parked.setdefault(task.node, deque()).append(task)

    def parked_nodes(self) -> list[str]:
        with self._cond:
            return list(self._parked)

    def waits_for(self, node: str) -> bool:
        """Whether a bind waits for `node`'s lock (read without the lock: a hint, checked again on release)."""
        return node in self._parked

    def release(self, node: str) -> BindTask | None:
        """The node's lock is free: the first bind waiting for it goes (the next ones wait for it in turn)."""
        with self._cond:
            line = self._parked.get(node)
            if not line:
                return None
            task = line.popleft()
            if not line:
                del self._parked[node]
            self._queue.append(task)
            self._cond.notify()
            return task

    def expire(self, older_than_s: float) -> list[BindTask]:
        """Take out the parked binds that have waited longer than `older_than_s` (their lock never freed)."""
        now = time.monotonic()
        out: list[BindTask] = []
        with self._cond:
            for node in list(self._parked):
                line = self._parked[node]
                while line and now - line[0].since > older_than_s:
                    out.append(line.popleft())
                if not line:
                    del self._parked[node]
        return out

    def __len__(self) -> int:
        """Binds not finished yet (queued, parked or being worked on)."""
        with self._cond:
            return len(self._queue) + sum(len(q) for q in self._parked.values()) + self._busy

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until nothing is queued or being worked on (parked binds aside); whether it got there."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def stop(self, timeout_s: float = 5.0) -> None:
        """Finish what is queued, then stop the workers."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=timeout_s)

    # ---- the workers ----------------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                task = self._queue.popleft()
                self._busy += 1
            try:
                try:
                    result = self._work(task)
                except Exception as exc:  # a bind must always have an outcome, whatever went wrong
                    log.exception("binding %s failed unexpectedly", task.key)
                    result = BindResult(False, f"binding {task.key} failed: {type(exc).__name__}: {exc}")
                self._done(task, result)
            except Exception:
                log.exception("recording the outcome of binding %s failed", task.key)
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()


class AsyncBinds:
    """The bind path of the Kubernetes adapter: `bind` decides and hands over, `outcomes` reports back."""

    def __init__(
        self,
        binder: Binder,
        locks: NodeLockView,
        *,
        node: Lookup,
        pod: Lookup,
        events: EventQueue,
        wake: Callable[[], None],
        lock_timeout_s: float = 60.0,
        whole_gpu_lock: bool = True,
        workers: int = 8,
        prebind: VolumePrebind | None = None,
    ) -> None:
        self.binder, self.locks = binder, locks
        self.prebind = prebind  # claims waiting for their first consumer, before the Binding
        self._node, self._pod = node, pod
        self._events = events  # a failed bind re-sends its pod here
        self._wake = wake  # a failed bind: its pod waits again, a cycle should see it soon
        self.lock_timeout_s = lock_timeout_s
        self.whole_gpu_lock = whole_gpu_lock
        self.pool = BindPool(self._bind_now, self._bind_done, workers=workers)
        self._outcomes: list[BindOutcome] = []
        # pod uid -> (node, assignment annotation or None): being bound or bound by us, not yet seen bound by
        # the watch
        self._bound: dict[str, tuple[str, str | None]] = {}
        self._lock_waiters: set[str] = set()  # pods whose last bind waited for a node's bind lock
        self._lock = threading.Lock()

    # ---- the cycle's side -----------------------------------------------------------------------------------
    def bind(self, pod: PodInfo, assignment: GPUAssignment) -> Accepted:
        node = assignment.node
        lock = bool(assignment.gpus) and self.needs_lock(pod, node)
        park = False
        if lock:
            holder = self.locks.holder(node)
            if holder is not None and holder.uid != pod.uid:
                if not holder.ours:
                    with self._lock:  # a turn in a queue, not a scheduling failure: not reported as one
                        self._lock_waiters.add(pod.uid)
                    msg = f"node {node} is busy: waiting for the device plugin to allocate {holder.key}"
                    raise BindError(msg, node_busy=True)
                park = True  # behind a pod we bound there (of the same gang, say): its turn comes next
        task = BindTask(
            pod.namespace, pod.name, pod.uid, node, assignment if assignment.gpus else None, lock,
            claims=pod.constraints.claims,
        )  # fmt: skip
        with self._lock:
            self._bound[pod.uid] = (node, assignment.to_annotation() if assignment.gpus else None)
            self._lock_waiters.discard(pod.uid)
        if park:
            self.pool.park(task)
        else:
            if lock:
                self.locks.taken(node, pod.uid, pod.key)
            self.pool.submit(task)
        # A lock taken here does not make the node busy for the cycle: later binds of that node wait in line
        # in the binder, as the kubelet admits a node's pods one at a time anyway.
        return Accepted(in_flight=True)

    def needs_lock(self, pod: PodInfo, node: str) -> bool:
        """Whether the device plugin must find this GPU pod by the node's bind lock: fractional pods always
        (only Tessera's device plugin serves them); whole GPUs where Tessera's device plugin runs (the node
        advertises its slice resource) and serves whole GPUs too."""
        if pod.request.is_fractional:
            return True
        if not self.whole_gpu_lock:
            return False
        status = (self._node(node) or {}).get("status") or {}
        return GPU_SLICE_RESOURCE in (status.get("allocatable") or status.get("capacity") or {})

    def outcomes(self) -> list[BindOutcome]:
        with self._lock:
            out, self._outcomes = self._outcomes, []
        return out

    def __len__(self) -> int:
        return len(self.pool)

    def waits_in_line(self, uid: str, reason: str) -> bool:
        """Whether the cycle's `reason` for leaving pod `uid` pending only says that its last bind waited its
        turn for a node's bind lock (not a scheduling failure: not reported); any other reason ends that."""
        with self._lock:
            if uid in self._lock_waiters:
                if reason == Reason.BIND_FAILED:
                    return True
                self._lock_waiters.discard(uid)
        return False

    def release_parked(self) -> None:
        """Binds waiting for a node's lock: the next goes once it is free; those waiting too long fail."""
        for node in self.pool.parked_nodes():
            self._release(node)
        for task in self.pool.expire(self.lock_timeout_s):
            busy = self.locks.holder(task.node)
            who = busy.key if busy is not None else "another pod"
            reason = f"node {task.node} is busy: waited {self.lock_timeout_s:.0f}s for the device plugin to allocate {who}"
            self._bind_done(task, BindResult(False, reason, busy=True))

    def stop(self) -> None:
        self.pool.stop()

    # ---- the watch's side -----------------------------------------------------------------------------------
    def watched(self, ev: ResourceEvent) -> None:
        """A bind waiting for a node's lock goes as soon as the watch shows it free."""
        node = ev.obj.get("metadata", {}).get("name") if ev.kind == "Node" else None
        if ev.kind == "Pod":
            node = (ev.obj.get("spec") or {}).get("nodeName")
        if node and self.pool.waits_for(node):
            self._release(node)

    def shown_at(self, uid: str, *, bound: bool) -> tuple[str, str | None] | None:
        """Where a pod we are binding (or bound) should be shown until the watch catches up: (node, assignment
        annotation or None); None when it is not ours to show, or the watch shows it `bound` now."""
        with self._lock:
            bound_to = self._bound.get(uid)
            if bound_to is not None and bound:
                del self._bound[uid]
                bound_to = None
        return bound_to

    def forget(self, uid: str) -> None:
        """The pod is gone."""
        with self._lock:
            self._bound.pop(uid, None)
            self._lock_waiters.discard(uid)

    # ---- the binder threads' side ---------------------------------------------------------------------------
    def _bind_now(self, task: BindTask) -> BindResult:
        """A binder thread's work: the API requests of one bind."""
        if task.claims and self.prebind is not None:
            why = self.prebind.prepare(task.namespace, task.claims, task.node)
            if why is not None:
                return BindResult(False, why)
        meta = None
        if task.lock:
            meta = (self._node(task.node) or {}).get("metadata")
        return self.binder.bind(
            task.namespace, task.name, task.uid, task.node, task.assignment, lock=task.lock, node_meta=meta
        )

    def _bind_done(self, task: BindTask, result: BindResult) -> None:
        if result.ok:
            with self._lock:
                self._outcomes.append(BindOutcome(task.uid))
            return
        self._wake()  # a failed bind: its pod waits again
        if task.lock:
            self.locks.pod_gone(task.uid)  # the lock is not (or no longer) ours for this pod
        with self._lock:
            self._bound.pop(task.uid, None)
            (self._lock_waiters.add if result.busy else self._lock_waiters.discard)(task.uid)
            self._outcomes.append(BindOutcome(task.uid, result.reason, node_busy=result.busy))
        # The pod as the API has it (unbound): whoever assumed it bound sees it pending again.
        obj = self._pod(task.key)
        if obj is not None and (obj.get("metadata") or {}).get("uid") == task.uid:
            self._events.put(ResourceEvent("Pod", "MODIFIED", obj, obj))

    def _release(self, node: str) -> None:
        """The next bind waiting for `node`'s lock goes once the lock is free: not held for a pod the device
        plugin has not served, and gone from the node as the watch shows it (taking it is then one request;
        a lock that never goes is waited for until the binds behind it expire)."""
        with self._lock:  # informer threads and the cycle both call this: one release at a time
            annotations = ((self._node(node) or {}).get("metadata") or {}).get("annotations")
            if self.locks.holder(node) is not None or BIND_LOCK in (annotations or {}):
                return
            task = self.pool.release(node)
            if task is not None:
                self.locks.taken(node, task.uid, task.key)
