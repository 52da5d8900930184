"""Binds carried out by worker threads while the scheduling cycle goes on.

As kube-scheduler's binding cycle (or KAI's BindRequest handed to its binder): the cycle decides, assumes
the placement and hands the API requests over; the next cycle learns each outcome. Binds that take the
same node's bind lock go one after the other (a gang may put several pods on one node): a bind waits in
line (`park`) until the device plugin has served the pod holding the lock, and the adapter lets it go
(`release`) once the watch shows the lock free.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.api.assignment import GPUAssignment
from scheduler.kube.binder import BindResult

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

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


Work = Callable[[BindTask], BindResult]
Done = Callable[[BindTask, BindResult], None]


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
