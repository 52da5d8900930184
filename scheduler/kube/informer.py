"""Informer-style watch cache for one resource: list, then watch from the list's resourceVersion.

Like client-go's reflector: bookmarks advance the resourceVersion without events; a watch that ends is
resumed from the last resourceVersion seen; `410 Gone` (the history moved past us) triggers a full relist,
whose differences against the cache are emitted as ADDED/MODIFIED/DELETED so consumers never rebuild;
any other error backs off exponentially before retrying. Objects are kept as plain dicts (no model
deserialization on the hot path).

Like client-go's transform (`SetTransform`, which kube-scheduler uses to drop `managedFields`), each object
passes through the target's `transform` before it enters the cache or reaches a consumer. The scheduler's
`slim` drops `metadata.managedFields`, which nothing reads, and interns the strings repeated across objects
(keys, namespaces, node names, images, condition types...): at 50,000 pods the watch caches were most of
the scheduler's memory (docs/performance.md); `slim_pod` also drops what the scheduler never reads of a
pod's containers and their statuses. Nothing the scheduler writes is built from a cached object
(every write is a patch, a Binding or an eviction), so what a transform drops is never written back.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from scheduler.cache.gc_pause import BULK, paused_gc
from scheduler.kube.backoff import Backoff
from scheduler.kube.event_queue import ResourceEvent, object_key
from scheduler.kube.shared_values import SharedValues

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass(frozen=True)
class WatchTarget:
    """What to watch: a list function of the generated client (with its leading positional arguments)."""

    kind: str
    list_fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    field_selector: str | None = None
    label_selector: str | None = None
    # A kind the cluster may not serve (a CRD added by an upgrade: Helm never installs CRDs on upgrade):
    # while the API answers 404 the cache is empty and counts as synced; the list is retried.
    optional: bool = False
    # Applied to every object listed or watched before it is cached or handed on (None: kept as received).
    transform: Callable[[Obj], Obj] | None = None
    # How a page of the list and a line of the watch are decoded (pods: only what is kept, pod_decoder.py).
    decode_list: Callable[[Any], Any] = json.loads
    decode_event: Callable[[Any], Any] = json.loads

    def call(self, **kwargs: Any) -> Any:
        if self.field_selector:
            kwargs["field_selector"] = self.field_selector
        if self.label_selector:
            kwargs["label_selector"] = self.label_selector
        return self.list_fn(*self.args, _preload_content=False, **kwargs)


class Gone(Exception):
    """The watch's resourceVersion is too old: relist."""


class Informer:
    def __init__(
        self,
        target: WatchTarget,
        sink: Callable[[ResourceEvent], None],
        *,
        backoff: Backoff | None = None,
        watch_timeout_s: int = 300,
        page_size: int = 500,
    ) -> None:
        self.target = target
        self.sink = sink
        self.backoff = backoff or Backoff()
        self.watch_timeout_s = watch_timeout_s
        self.page_size = page_size
        self.cache: dict[str, Obj] = {}
        self.resource_version = ""
        self.synced = threading.Event()
        self.lists = 0  # full lists done (1 at start, +1 per relist)
        self.errors = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._resp: Any = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> Informer:
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.target.kind}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            # Unblock the read of a long-running watch: shut the socket down under it.
            sock = getattr(getattr(resp, "connection", None), "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def snapshot(self) -> list[Obj]:
        with self._lock:
            return list(self.cache.values())

    def get(self, key: str) -> Obj | None:
        with self._lock:
            return self.cache.get(key)

    # ---- the loop ----------------------------------------------------------------------------------------
    def run(self) -> None:
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
            except Gone:
                log.info(
                    "%s watch expired at resourceVersion %s; relisting",
                    self.target.kind,
                    self.resource_version,
                )
                need_list = True
            except Exception as exc:  # connection errors, API errors, malformed data: back off and retry
                if self._stop.is_set():
                    break
                self.errors += 1
                if isinstance(exc, ApiException) and exc.status == 410:
                    need_list = True
                if self.target.optional and isinstance(exc, ApiException) and exc.status == 404:
                    if not self.synced.is_set():
                        log.warning("%s is not served by this cluster (its CRD is not installed): none seen "
                                    "until it is", self.target.kind)  # fmt: skip
                    self.synced.set()
                delay = self.backoff.next_delay()
                log.warning(
                    "%s watch failed (%s); retrying in %.1fs", self.target.kind, _one_line(exc), delay
                )
                self._stop.wait(delay)

    def _list(self) -> None:
        items: list[Obj] = []
        token: str | None = None
        # A list makes every object of the kind at once, all long-lived: the cyclic collector would scan them
        # again and again as they are made (a third of a 150,000-pod relist's decoding); see gc_pause.py.
        with paused_gc(BULK):
            while True:
                kwargs: dict[str, Any] = {"limit": self.page_size, "_request_timeout": (10, 60)}
                if token:
                    kwargs["_continue"] = token
                resp = self.target.call(**kwargs)
                body = list_page(self.target, resp.data, items)
                meta = body.get("metadata") or {}
                token = meta.get("continue")
                if not token:
                    break
        self._replace(items, str(meta.get("resourceVersion", "")))
        self.lists += 1
        self.backoff.reset()
        self.synced.set()

    def _replace(self, items: list[Obj], resource_version: str) -> None:
        """Install a fresh list; emit only what changed against the cache (a relist is not a rebuild)."""
        fresh = {object_key(o): o for o in items}
        events: list[ResourceEvent] = []
        with self._lock:
            for key, gone in self.cache.items():
                if key not in fresh:
                    events.append(ResourceEvent(self.target.kind, "DELETED", gone, gone))
            for key, obj in fresh.items():
                old = self.cache.get(key)
                if old is None:
                    events.append(ResourceEvent(self.target.kind, "ADDED", obj, None))
                elif _rv(old) != _rv(obj):
                    events.append(ResourceEvent(self.target.kind, "MODIFIED", obj, old))
            self.cache = fresh
            self.resource_version = resource_version
        for event in events:
            self.sink(event)

    def _watch(self) -> None:
        resp = self.target.call(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout_s,
            # A connection that dies silently must not hang the informer: the server ends the watch after
            # timeout_seconds, so a read that waits much longer than that is a dead connection.
            _request_timeout=(10, self.watch_timeout_s + 30),
        )
        self._resp = resp
        try:
            for line in _lines(resp):
                if self._stop.is_set():
                    return
                self._handle(self.target.decode_event(line))
        finally:
            self._resp = None
            resp.close()
            resp.release_conn()

    def _handle(self, event: Obj) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise ApiException(
                status=obj.get("code", 500), reason=f"{obj.get('reason')}: {obj.get('message')}"
            )
        rv = _rv(obj)
        if kind == "BOOKMARK":
            self.resource_version = rv or self.resource_version
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("%s watch sent an unknown event type %r; ignored", self.target.kind, kind)
            return
        if self.target.transform is not None:
            obj = self.target.transform(obj)
        key = object_key(obj)
        with self._lock:
            old = self.cache.get(key)
            if kind == "DELETED":
                self.cache.pop(key, None)
            else:
                self.cache[key] = obj
            self.resource_version = rv or self.resource_version
        self.backoff.reset()
        self.sink(ResourceEvent(self.target.kind, kind, obj, old))


def list_page(target: WatchTarget, data: Any, items: list[Obj]) -> Obj:
    """Decode a page of `target`'s list, append its objects (transformed) to `items`; the page's body."""
    body: Obj = target.decode_list(data)
    page: list[Obj] = body.get("items") or []
    transform = target.transform
    items.extend(map(transform, page) if transform is not None else page)
    return body


def slim(obj: Obj) -> Obj:
    """An object as the scheduler caches it: without `metadata.managedFields` (the server's field ownership
    bookkeeping, often the largest part of an object, read by nobody here), its strings interned, so the
    thousands of copies of the same key or value share one string. Everything else is kept as it came.
    `obj` itself (freshly decoded, owned by the informer) loses its managedFields."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return _interned(obj)


# What of a container the scheduler reads: its name (in messages), resources (requests, limits, claims),
# ports (host ports) and restartPolicy (a sidecar). The rest (image, command, env, mounts, probes, security
# context...) is most of a pod's spec and is left out of the cache; so are volumes other than claims (the
# service account token's, config maps, secrets, scratch space) and the kubelet's per-container statuses,
# the largest part of a running pod's status (kube-scheduler reads those for in-place resizes only, which
# Tessera does not follow: docs/differences-from-kube-scheduler.md), the pod's addresses and QoS class, and
# when each condition last changed (the scheduler reads a condition's type, status, reason and message).
_CONTAINER_FIELDS = frozenset({"name", "resources", "ports", "restartPolicy"})
_CONTAINER_LISTS = ("containers", "initContainers")
_CLAIM_VOLUMES = frozenset({"persistentVolumeClaim", "ephemeral"})
_UNREAD_POD_STATUS = (
    "containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses", "podIP", "podIPs", "hostIP",
    "hostIPs", "qosClass",
)  # fmt: skip
_CONDITION_TIMES = frozenset({"lastTransitionTime", "lastProbeTime"})
# What the pods of one controller have alike, kept once (`shared_values.py`): of the metadata, the labels,
# owners and finalizers (not the annotations: Tessera's assignment makes those of a running pod its own);
# all of the spec but the node it is bound to (`_pod_spec`); the conditions.
_SHARED_PARTS = {
    "metadata": frozenset({"labels", "ownerReferences", "finalizers"}),
    "status": frozenset({"conditions"}),
}


def slim_pod(obj: Obj, shared: SharedValues | None = None) -> Obj:
    """`slim` for a pod, which also leaves out what the scheduler never reads of its containers (their
    image, command, environment, mounts, probes...), its volumes other than claims, its containers'
    statuses, addresses and the times of its conditions, which a relist of 150,000 pods otherwise keeps
    for every one (`tessera bench events --api-fields`). Anything not a map or a list of maps where one is
    expected is kept as it came (the parser tells what is wrong with it). With `shared`, the parts pods
    have alike are the same objects in every pod that has them (the pod watch's cache: `PodSlimmer`)."""
    spec = obj.get("spec")
    if type(spec) is dict:
        for kind in _CONTAINER_LISTS:
            containers = spec.get(kind)
            if type(containers) is list:
                spec[kind] = [
                    {k: v for k, v in c.items() if k in _CONTAINER_FIELDS} if type(c) is dict else c
                    for c in containers
                ]
        spec.pop("ephemeralContainers", None)  # debugging containers: no requests, never scheduled
        volumes = spec.get("volumes")
        if type(volumes) is list:  # only claims say where a pod may go (its service account token does not)
            claims = [v for v in volumes if type(v) is not dict or _CLAIM_VOLUMES & v.keys()]
            if claims:
                spec["volumes"] = claims
            else:  # none is no list at all: a map of five keys takes 184 bytes, of six 272 (13 MiB a relist)
                del spec["volumes"]
    status = obj.get("status")
    if type(status) is dict:
        for key in _UNREAD_POD_STATUS:
            status.pop(key, None)
        conditions = status.get("conditions")
        if type(conditions) is list:
            status["conditions"] = [
                {k: v for k, v in c.items() if k not in _CONDITION_TIMES} if type(c) is dict else c
                for c in conditions
            ]
    if shared is None:
        return slim(obj)
    meta = obj.get("metadata")
    if type(meta) is dict:
        meta.pop("managedFields", None)
    return {sys.intern(key): _pod_part(key, value, shared) for key, value in obj.items()}


def _pod_part(name: str, part: Any, shared: SharedValues) -> Any:
    """`_interned(part)`, with the parts pods have alike shared (each copied only when first seen)."""
    if type(part) is not dict:
        return _interned_item(part)
    if name == "spec":
        return _pod_spec(part, shared)
    return _interned(part, shared, _SHARED_PARTS.get(name, frozenset()))


def _pod_spec(spec: Obj, shared: SharedValues) -> Obj:
    """The pods of a controller have the same spec but for the node they are bound to (once `slim_pod` left
    out the per-pod volumes): all of it but `nodeName` is shared, each pod's spec a map of its own."""
    node = spec.pop("nodeName", None)
    out: Obj = dict(shared.share(spec, _interned))
    if node is not None:
        out[_NODE_NAME] = sys.intern(node) if type(node) is str else node
    return out


_NODE_NAME = sys.intern("nodeName")


class PodSlimmer:
    """The pod watch's transform: `slim_pod`, the parts its pods have alike shared within its cache."""

    def __init__(self) -> None:
        self.shared = SharedValues()

    def __call__(self, obj: Obj) -> Obj:
        return slim_pod(obj, self.shared)


# String values this long or longer are kept as they came (keys are always interned): long values are rarely
# shared. Short unique ones (uids, timestamps) are interned too: cheaper than telling them apart, and an
# interned string is freed with its last reference.
_INTERN_MAX = 64


def _interned(obj: Obj, shared: SharedValues | None = None, keys: frozenset[str] = frozenset()) -> Obj:
    """A copy of `obj` with its keys and short string values interned; with `shared`, its lists and maps at
    `keys` are the equal ones kept before (`SharedValues.share`)."""
    intern = sys.intern
    out: Obj = {}
    for key, value in obj.items():
        kind = type(value)
        if kind is str:
            if len(value) < _INTERN_MAX:
                value = intern(value)
        elif kind is dict or kind is list:
            if shared is not None and value and key in keys:
                value = shared.share(value, _interned_item)
            else:
                value = _interned_item(value)
        out[intern(key)] = value
    return out


def _interned_item(item: Any) -> Any:
    kind = type(item)
    if kind is dict:
        return _interned(item)
    if kind is list:
        return [_interned_item(x) for x in item]
    if kind is str and len(item) < _INTERN_MAX:
        return sys.intern(item)
    return item


def _lines(resp: Any) -> Iterator[str]:
    for line in iter_resp_lines(resp):
        if line:
            yield line


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
