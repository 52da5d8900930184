"""Leader election on a coordination.k8s.io/v1 Lease.

`kubernetes.leaderelection` works against the API, but its loop can neither be stopped nor release the
lease, so a standby would wait a full lease duration after a clean shutdown. This elector follows
client-go's rules instead: a lease is expired when its record has not changed for `lease_duration_s` by
our own clock (no trust in other machines' clocks); every write is guarded by the resourceVersion; a leader
that cannot renew within `renew_deadline_s` stops leading; `stop()` releases the lease.

A renewal is bounded in time, not only in outcome: while leading, each request may take only what is left
of the renew deadline, so a leader whose API calls hang (a slow or partitioned API server) has stepped down
before a standby, which waits a whole lease duration, can take over. Without that bound both led at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)


class LeaseElector:
    def __init__(
        self,
        coordination: client.CoordinationV1Api,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        on_started_leading: Callable[[], None] = lambda: None,
        on_stopped_leading: Callable[[], None] = lambda: None,
    ) -> None:
        self.api = coordination
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.is_leader = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self._state = threading.Lock()  # _lose runs on the loop and on the deadline watchdog

    def start(self) -> LeaseElector:
        self._thread = threading.Thread(target=self._run, name=f"leader-{self.identity}", daemon=True)
        self._thread.start()
        threading.Thread(
            target=self._watch_deadline, name=f"leader-deadline-{self.identity}", daemon=True
        ).start()
        return self

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if release and self.is_leader.is_set():
            self._release()
        self._lose()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()  # the lease cannot have been renewed before the attempt began
            ok = self.try_acquire_or_renew()
            now = time.monotonic()
            if ok:
                self._last_renew = started
                if not self.is_leader.is_set():
                    log.info("%s became the leader (lease %s/%s)", self.identity, self.namespace, self.name)
                    self.is_leader.set()
                    self._callback(self.on_started_leading)
            elif self.is_leader.is_set() and now - self._last_renew > self.renew_deadline_s:
                log.warning(
                    "%s could not renew its lease for %.0fs; stepping down",
                    self.identity,
                    now - self._last_renew,
                )
                self._lose()
            self._stop.wait(self.retry_period_s)

    def _watch_deadline(self) -> None:
        """Step down once the renew deadline has passed, even while a renewal is still in flight."""
        while not self._stop.wait(min(0.05, self.renew_deadline_s / 10)):
            late = time.monotonic() - self._last_renew
            if self.is_leader.is_set() and late > self.renew_deadline_s:
                log.warning("%s could not renew its lease for %.1fs; stepping down", self.identity, late)
                self._lose()

    def _lose(self) -> None:
        with self._state:
            was_leader = self.is_leader.is_set()
            self.is_leader.clear()
        if was_leader:
            self._callback(self.on_stopped_leading)

    @staticmethod
    def _callback(fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # a callback bug must not kill the election loop
            log.exception("leader election callback failed")

    def _budget(self) -> float:
        """Seconds a request may take: what is left of the renew deadline while leading."""
        if not self.is_leader.is_set():
            return self.renew_deadline_s
        return max(0.05, self.renew_deadline_s - (time.monotonic() - self._last_renew))

    def try_acquire_or_renew(self) -> bool:
        try:
            return self._try_acquire_or_renew()
        except ApiException:
            raise
        except Exception as exc:  # a timed-out or refused connection: this attempt failed
            log.warning("%s: lease %s/%s unreachable: %s", self.identity, self.namespace, self.name, exc)
            return False

    def _try_acquire_or_renew(self) -> bool:
        now = datetime.now(UTC)
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self._budget())
        except ApiException as exc:
            if exc.status != 404:
                log.warning("reading lease %s/%s failed: %s", self.namespace, self.name, exc.reason)
                return False
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=self._spec(now, now, 0),
            )
            try:
                self.api.create_namespaced_lease(self.namespace, body, _request_timeout=self._budget())
            except ApiException:
                return False
            return True
        spec = lease.spec or client.V1LeaseSpec()
        record = (spec.holder_identity, spec.renew_time, spec.lease_duration_seconds)
        mono = time.monotonic()
        if record != self._observed:
            self._observed, self._observed_at = record, mono
        holder = spec.holder_identity or ""
        duration = spec.lease_duration_seconds or self.lease_duration_s
        if holder and holder != self.identity and mono - self._observed_at < duration:
            return False  # held by someone else and not expired
        transitions = (spec.lease_transitions or 0) + (0 if holder == self.identity else 1)
        acquired = spec.acquire_time if holder == self.identity and spec.acquire_time else now
        lease.spec = self._spec(acquired, now, transitions)
        try:
            # Guarded by the resourceVersion; bounded by what is left of the renew deadline.
            self.api.replace_namespaced_lease(
                self.name, self.namespace, lease, _request_timeout=self._budget()
            )
        except ApiException as exc:
            log.info(
                "%s lost the race for lease %s/%s: %s", self.identity, self.namespace, self.name, exc.reason
            )
            return False
        return True

    def _spec(self, acquired: datetime, renewed: datetime, transitions: int) -> client.V1LeaseSpec:
        return client.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=max(1, round(self.lease_duration_s)),
            acquire_time=acquired,
            renew_time=renewed,
            lease_transitions=transitions,
        )

    def _release(self) -> None:
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = ""
            lease.spec.lease_duration_seconds = 1
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as exc:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc.reason)
