"""Binds carried out by worker threads while the scheduling cycle goes on.

As kube-scheduler's binding cycle (or KAI's BindRequest handed to its binder): the cycle decides, assumes
the placement (ASSUMED in the ledger, and in `InFlight` with its job's other binds) and hands the API request
over; the next cycle learns each outcome (`outcomes`). The pod lives there, in the scheduler's cache, until
the answer comes: nothing here remembers where it goes, and a version of the pod the watch sends meanwhile
(still unbound) is older than the bind, which the cache knows.

`AsyncBinds` is the adapter's side (`KubeCluster.bind`): it hands each bind to the `BindPool`, whose threads
make the Binding request (`binder.py`), and returns at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.api.assignment import GPUAssignment
from scheduler.cache.cluster import BindOutcome
from scheduler.cache.cluster import BindResult as Accepted
from scheduler.kube.binder import Binder, BindResult
from scheduler.kube.volume_prebind import VolumePrebind
from scheduler.model.types import PodInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BindTask:
    namespace: str
    name: str
    uid: str
    node: str
    assignment: GPUAssignment | None
    since: float = field(default_factory=time.monotonic)
    claims: tuple[str, ...] = ()  # the pod's PersistentVolumeClaims (volume_prebind.py acts on them first)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


Work = Callable[[BindTask], BindResult]
Done = Callable[[BindTask, BindResult], None]


class BindPool:
    def __init__(self, work: Work, done: Done, *, workers: int = 8) -> None:
        self._work, self._done = work, done
        self._queue: deque[BindTask] = deque()
        self._busy = 0  # tasks being worked on
        self._cond = threading.Condition()
        self._stopping = False
        self._workers = max(1, workers)
        self._threads: list[threading.Thread] = []  # started with the first bind

    def submit(self, task: BindTask) -> None:
        with self._cond:
            if not self._threads and not self._stopping:
                self._threads = [threading.Thread(target=self._run, name=f"binder-{i}", daemon=True)
                                 for i in range(self._workers)]  # fmt: skip
                for t in self._threads:
                    t.start()
            self._queue.append(task)
            self._cond.notify()

    def __len__(self) -> int:
        """Binds not finished yet (queued or being worked on)."""
        with self._cond:
            return len(self._queue) + self._busy

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until nothing is queued or being worked on; whether it got there."""
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
    """The bind path of the Kubernetes adapter: `bind` hands over, `outcomes` reports back."""

    def __init__(
        self,
        binder: Binder,
        *,
        wake: Callable[[], None],
        workers: int = 8,
        prebind: VolumePrebind | None = None,
    ) -> None:
        self.binder = binder
        self.prebind = prebind  # claims waiting for their first consumer, before the Binding
        self._wake = wake  # a bind's outcome: the next cycle should see it soon
        self.pool = BindPool(self._bind_now, self._bind_done, workers=workers)
        self._outcomes: list[BindOutcome] = []
        self._lock = threading.Lock()

    def bind(self, pod: PodInfo, assignment: GPUAssignment) -> Accepted:
        gpus = assignment if assignment.gpus else None
        task = BindTask(
            pod.namespace, pod.name, pod.uid, assignment.node, gpus, claims=pod.constraints.claims
        )
        self.pool.submit(task)
        return Accepted(in_flight=True)

    def outcomes(self) -> list[BindOutcome]:
        with self._lock:
            out, self._outcomes = self._outcomes, []
        return out

    def __len__(self) -> int:
        return len(self.pool)

    def stop(self) -> None:
        self.pool.stop()

    def _bind_now(self, task: BindTask) -> BindResult:
        """A binder thread's work: the API requests of one bind (the claims it waits for first)."""
        if task.claims and self.prebind is not None:
            why = self.prebind.prepare(task.namespace, task.claims, task.node)
            if why is not None:
                return BindResult(False, why)
        return self.binder.bind(task.namespace, task.name, task.uid, task.node, task.assignment)

    def _bind_done(self, task: BindTask, result: BindResult) -> None:
        with self._lock:
            self._outcomes.append(BindOutcome(task.uid, None if result.ok else result.reason))
        if not result.ok:
            self._wake()  # its pod waits again: a cycle should place it soon
