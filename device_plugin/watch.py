"""The pods bound to this node, kept current by a list and a watch (field selector `spec.nodeName=<node>`,
the official Kubernetes client's `watch.Watch`).

`Allocate` finds the pod the kubelet admits here, and `PreStartContainer` the pod that holds a container's
devices, in this cache: no API request on the kubelet's path. Readers wait for a change (`wait_change`) when
the kubelet saw a pod before the watch did.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from device_plugin.pods import PodView, pod_view

log = logging.getLogger(__name__)
WATCH_TIMEOUT_S = 300  # the server ends a watch after this; it is started again from the last version
MAX_BACKOFF_S = 5.0
GONE = 410


class PodWatch:
    def __init__(self, api: k8s.CoreV1Api, node: str, *, request_timeout_s: float = 10.0) -> None:
        self._api = api
        self.node = node
        self._selector = f"spec.nodeName={node}"
        self._timeout = request_timeout_s
        self._pods: dict[str, PodView] = {}  # by uid
        self._by_name: dict[tuple[str, str], str] = {}  # (namespace, name) -> uid
        self._version = 0  # bumped on every change: readers wait on it
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._watch: k8s_watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self.synced = threading.Event()

    # ---- readers -----------------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        with self._changed:
            return self._version

    def pods(self) -> list[PodView]:
        with self._changed:
            return list(self._pods.values())

    def get(self, uid: str) -> PodView | None:
        with self._changed:
            return self._pods.get(uid)

    def by_name(self, namespace: str, name: str) -> PodView | None:
        with self._changed:
            uid = self._by_name.get((namespace, name))
            return None if uid is None else self._pods.get(uid)

    def wait_change(self, seen: int, timeout_s: float) -> int:
        """Block until the cache changed since version `seen` (or `timeout_s` passed); the version now."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen or self._stop.is_set(), timeout=timeout_s)
            return self._version

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> PodWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        with self._changed:
            self._changed.notify_all()
        self._thread.join(timeout=2)

    # ---- the watch thread --------------------------------------------------------------------------------
    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                version = self._list()
                backoff = 0.2
                while not self._stop.is_set():
                    version = self._stream(version)
            except ApiException as exc:
                if exc.status != GONE:
                    log.warning(
                        "pod watch of node %s: HTTP %s %s; listing again", self.node, exc.status, exc.reason
                    )
                    self._stop.wait(backoff)
                    backoff = min(MAX_BACKOFF_S, backoff * 2)
            except Exception as exc:  # the API server went away, a connection broke: list again, later
                log.warning("pod watch of node %s failed (%s); listing again", self.node, exc)
                self._stop.wait(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)

    def _list(self) -> str:
        resp: Any = self._api.list_pod_for_all_namespaces(  # raw: no model deserialisation
            field_selector=self._selector, _preload_content=False, _request_timeout=self._timeout
        )
        try:
            data = json.loads(resp.data)
        finally:
            resp.release_conn()
        pods = {}
        for item in data.get("items") or []:
            view = pod_view(item)
            pods[view.uid] = view
        with self._changed:
            self._pods = pods
            self._by_name = {(p.namespace, p.name): uid for uid, p in pods.items()}
            self._version += 1
            self._changed.notify_all()
        self.synced.set()
        return str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _stream(self, version: str) -> str:
        """Follow the watch from `version` until the server ends it; the last version seen."""
        self._watch = w = k8s_watch.Watch()
        for event in w.stream(
            self._api.list_pod_for_all_namespaces,
            field_selector=self._selector,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_TIMEOUT_S,
        ):
            obj: dict[str, Any] = event["raw_object"]
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                self._apply(event["type"], pod_view(obj))
            if self._stop.is_set():
                break
        return version

    def _apply(self, kind: str, pod: PodView) -> None:
        with self._changed:
            if kind == "DELETED":
                self._pods.pop(pod.uid, None)
                if self._by_name.get((pod.namespace, pod.name)) == pod.uid:
                    del self._by_name[(pod.namespace, pod.name)]
            else:
                self._pods[pod.uid] = pod
                self._by_name[(pod.namespace, pod.name)] = pod.uid
            self._version += 1
            self._changed.notify_all()


def wait_until(watch: PodWatch, probe: Any, timeout_s: float) -> Any:
    """Call `probe()` until it returns something other than None, waiting for the watch between tries; its
    last value (None when `timeout_s` passed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = watch.version
        found = probe()
        left = deadline - time.monotonic()
        if found is not None or left <= 0:
            return found
        watch.wait_change(seen, min(left, 0.5))
