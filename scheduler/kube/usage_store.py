"""The queues' usage history in a ConfigMap (time-based fair share; docs/fairshare.md).

Why a ConfigMap and not the Queue status: the history is one series for the whole cluster (every queue's
usage is normalised by the cluster's capacity over the same window, which belongs to no queue); it is
written as one object every `persist_s` seconds by the leader, not into every Queue's status each cycle
(Queues are watched by every replica, the webhook and the CLI, which would all pay for the history); and
a snapshot of all queues is consistent by construction. It lives in the scheduler's namespace, readable
by `kubectl get configmap tessera-usage-history -o yaml`, and survives restarts and leader changes.

A read that fails (the API server unreachable, a denied permission) raises `UsageStoreError`: the caller
then never saves over it. Content that is not a history is kept under `history.unreadable.json` by the
next save, so nothing a person wrote there is lost.
"""

from __future__ import annotations

import logging

from kubernetes import client
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from scheduler.api.usage import HISTORY_KEY, UsageHistoryRecord
from scheduler.queues.usage_store import UsageStoreError, dump_record, parse_record

log = logging.getLogger(__name__)

UNREADABLE_KEY = "history.unreadable.json"
LABELS = {"app.kubernetes.io/part-of": "tessera", "app.kubernetes.io/component": "scheduler"}


def _reason(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


class ConfigMapUsageStore:
    def __init__(self, core: client.CoreV1Api, namespace: str, name: str, *, timeout_s: float = 10.0) -> None:
        self.core = core
        self.namespace = namespace
        self.name = name
        self.timeout_s = timeout_s
        self.unreadable: str | None = None  # kept aside by the next save
        self._exists: bool | None = None

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    def load(self) -> UsageHistoryRecord | None:
        try:
            cm = self.core.read_namespaced_config_map(
                self.name, self.namespace, _request_timeout=self.timeout_s
            )
        except ApiException as exc:
            if exc.status == 404:
                self._exists = False
                return None
            raise UsageStoreError(f"{self.where}: {_reason(exc)}") from None
        except (HTTPError, OSError) as exc:
            raise UsageStoreError(f"{self.where}: {_reason(exc)}") from None
        self._exists = True
        data = cm.data or {}
        self.unreadable = data.get(UNREADABLE_KEY)
        text = data.get(HISTORY_KEY)
        if text is None:
            return None
        record = parse_record(text, self.where)
        if record is None:
            self.unreadable = text
        return record

    def save(self, record: UsageHistoryRecord) -> None:
        data = {HISTORY_KEY: dump_record(record)}
        if self.unreadable is not None:
            data[UNREADABLE_KEY] = self.unreadable
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace, labels=LABELS), data=data
        )
        try:
            if self._exists is False:
                try:
                    self.core.create_namespaced_config_map(
                        self.namespace, body, _request_timeout=self.timeout_s
                    )
                    self._exists = True
                    return
                except ApiException as exc:
                    if exc.status != 409:  # created meanwhile (by a previous leader): replace it
                        raise
            # The leader is the only writer: the last save wins (no resourceVersion precondition).
            self.core.replace_namespaced_config_map(
                self.name, self.namespace, body, _request_timeout=self.timeout_s
            )
            self._exists = True
        except ApiException as exc:
            if exc.status == 404:
                self._exists = False  # deleted by someone: created again at the next save
            raise UsageStoreError(f"{self.where}: {_reason(exc)}") from None
        except (HTTPError, OSError) as exc:
            raise UsageStoreError(f"{self.where}: {_reason(exc)}") from None
