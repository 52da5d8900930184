"""A small, stateful Kubernetes API server for tests, spoken to over HTTP by the real `kubernetes` client.

It serves the REST protocol of the real server for the resources Tessera touches: get, list (label and
field selectors, limit/continue), create, replace (409 on a stale resourceVersion), patch (merge, strategic
merge, JSON patch), delete (preconditions, finalizers, optional graceful pod deletion), deletecollection,
`status` subresources, `pods/binding`, `pods/eviction` (PodDisruptionBudgets and injected refusals) and
watch (chunked JSON lines, resourceVersion semantics, bookmarks, timeoutSeconds, 410 Gone once history
expired). Objects get a uid, creationTimestamp and a global, monotonically increasing resourceVersion.

What it does not do (a real cluster would): authentication/authorization, admission webhooks, defaulting
beyond a few pod fields, OpenAPI validation of bodies, garbage collection by ownerReferences, server-side
apply, protobuf, and multiple versions of one resource.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import re
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes import client as k8s

from tests.fakes.errors import ApiError, success_status
from tests.fakes.resources import (
    ResourceType,
    builtin_types,
    tessera_types,
    workload_types,
)
from tests.fakes.selectors import SelectorError, parse_field_selector, parse_label_selector
from tests.fakes.store import EvictionRefusal, Obj, Store, WatchEvent

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None
    body: Any
    status: int

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None


@dataclass
class _Injected:
    method: str
    pattern: re.Pattern[str]
    code: int
    message: str
    remaining: int


@dataclass(frozen=True)
class _Route:
    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    api: FakeKubeAPI


class FakeKubeAPI:
    def __init__(
        self,
        *,
        history_limit: int = 10_000,
        bookmark_interval: float = 1.0,
        namespaces: tuple[str, ...] = DEFAULT_NAMESPACES,
        crds: bool = True,
    ) -> None:
        self.store = Store(history_limit=history_limit)
        self.bookmark_interval = bookmark_interval
        self._requests: list[RecordedRequest] = []
        self._injected: list[_Injected] = []
        self._lock = threading.Lock()
        self._watch_generation = 0
        self._bookmark_generation = 0
        self._stopping = False
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        for rt in builtin_types():
            self.store.register(rt)
        if crds:
            for rt in [*tessera_types(), *workload_types()]:
                self.store.register(rt)
        for ns in namespaces:
            self.seed(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ns},
                    "status": {"phase": "Active"},
                }
            )

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> FakeKubeAPI:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.api = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-kube-api", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        with self.store.cond:
            self.store.cond.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeKubeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the server first"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def configuration(self) -> k8s.Configuration:
        config = k8s.Configuration()
        config.host = self.url
        return config

    def client(self) -> k8s.ApiClient:
        """A real `kubernetes.client.ApiClient` pointed at this server."""
        return k8s.ApiClient(self.configuration())

    # ---- resource types ----------------------------------------------------------------------------------
    def register(self, rt: ResourceType) -> None:
        self.store.register(rt)

    def register_custom_resource(
        self,
        group: str,
        version: str,
        plural: str,
        kind: str,
        *,
        namespaced: bool = True,
        status_subresource: bool = True,
    ) -> ResourceType:
        rt = ResourceType(group, version, plural, kind, namespaced, status_subresource, builtin=False)
        self.store.register(rt)
        return rt

    def resource_type(self, plural: str, group: str | None = None) -> ResourceType:
        if group is not None:
            rt = self.store.types.get((group, plural))
            if rt is None:
                raise KeyError(f"no resource {plural!r} in group {group!r}")
            return rt
        if ("", plural) in self.store.types:
            return self.store.types[("", plural)]
        found = [rt for (g, p), rt in self.store.types.items() if p == plural]
        if len(found) != 1:
            raise KeyError(f"resource {plural!r} is {'ambiguous' if found else 'unknown'}; pass group=")
        return found[0]

    # ---- direct object access for tests (bypasses admission rules, still emits watch events) -------------
    def seed(self, obj: Obj) -> Obj:
        """Store `obj` as is (create or overwrite), by its apiVersion and kind. Returns the stored copy."""
        return self.store.put_raw(self.store.by_kind(obj["apiVersion"], obj["kind"]), obj)

    def get(self, plural: str, name: str, namespace: str | None = None, group: str | None = None) -> Obj:
        rt = self.resource_type(plural, group)
        return self.store.get(rt, (namespace or "default") if rt.namespaced else None, name)

    def find(
        self, plural: str, name: str, namespace: str | None = None, group: str | None = None
    ) -> Obj | None:
        try:
            return self.get(plural, name, namespace, group)
        except ApiError:
            return None

    def objects(
        self, plural: str, namespace: str | None = None, group: str | None = None, label_selector: str = ""
    ) -> list[Obj]:
        match = parse_label_selector(label_selector) if label_selector else (lambda _labels: True)
        items, _ = self.store.select(
            self.resource_type(plural, group), namespace, lambda o: match(o["metadata"].get("labels") or {})
        )
        return items

    def modify(
        self,
        plural: str,
        name: str,
        change: Callable[[Obj], None],
        namespace: str | None = None,
        group: str | None = None,
    ) -> Obj:
        """Apply `change` to the stored object in place (e.g. to play the kubelet setting a pod Running)."""
        rt = self.resource_type(plural, group)
        with self.store.cond:
            obj = self.get(plural, name, namespace, group)
            change(obj)
            return self.store.put_raw(rt, obj)

    def remove(self, plural: str, name: str, namespace: str | None = None, group: str | None = None) -> None:
        rt = self.resource_type(plural, group)
        self.store.remove_raw(rt, (namespace or "default") if rt.namespaced else None, name)

    def set_pod_phase(self, name: str, namespace: str = "default", phase: str = "Running") -> Obj:
        def change(pod: Obj) -> None:
            status = pod.setdefault("status", {})
            status["phase"] = phase
            conditions = [c for c in status.get("conditions", []) if c.get("type") != "Ready"]
            conditions.append({"type": "Ready", "status": "True" if phase == "Running" else "False"})
            status["conditions"] = conditions

        return self.modify("pods", name, change, namespace)

    def events_for(self, name: str, namespace: str = "default", kind: str | None = None) -> list[Obj]:
        """Core/v1 Events whose involvedObject is `name` (and `kind`, when given), oldest first."""
        return [
            e
            for e in self.objects("events", namespace)
            if e.get("involvedObject", {}).get("name") == name
            and (kind is None or e.get("involvedObject", {}).get("kind") == kind)
        ]

    @property
    def resource_version(self) -> int:
        return self.store.rv

    # ---- fault injection and control ---------------------------------------------------------------------
    @property
    def graceful_pod_deletion(self) -> bool:
        return self.store.graceful_pod_deletion

    @graceful_pod_deletion.setter
    def graceful_pod_deletion(self, value: bool) -> None:
        self.store.graceful_pod_deletion = value

    def complete_pod_deletions(self) -> int:
        return self.store.complete_pod_deletions()

    def expire_history(self) -> int:
        """Compact the watch history: watches resuming from an older resourceVersion get 410 Gone."""
        return self.store.expire_history()

    def drop_watches(self) -> None:
        """End every open watch stream (as an API server restart or a load balancer timeout would)."""
        with self.store.cond:
            self._watch_generation += 1
            self.store.cond.notify_all()

    def request_bookmarks(self) -> None:
        """Make every open watch that allows bookmarks send one now."""
        with self.store.cond:
            self._bookmark_generation += 1
            self.store.cond.notify_all()

    def refuse_evictions(
        self,
        name: str | None = None,
        namespace: str | None = None,
        times: int | None = None,
        code: int = 429,
        message: str = "Cannot evict pod as it would violate the pod's disruption budget.",
    ) -> EvictionRefusal:
        refusal = EvictionRefusal(namespace, name, times, code, message)
        with self.store.cond:
            self.store.eviction_refusals.append(refusal)
        return refusal

    def allow_evictions(self) -> None:
        with self.store.cond:
            self.store.eviction_refusals.clear()

    def fail_next(
        self, method: str, path_regex: str, code: int = 500, message: str = "injected failure", times: int = 1
    ) -> None:
        """Answer the next `times` requests matching method and path (regex, searched) with an error."""
        with self._lock:
            self._injected.append(_Injected(method.upper(), re.compile(path_regex), code, message, times))

    def _take_injected(self, method: str, path: str) -> ApiError | None:
        with self._lock:
            for inj in self._injected:
                if inj.method in (method, "*") and inj.pattern.search(path):
                    inj.remaining -= 1
                    if inj.remaining <= 0:
                        self._injected.remove(inj)
                    return ApiError(inj.code, inj.message)
        return None

    # ---- request log ------------------------------------------------------------------------------------
    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def requests_matching(self, method: str | None = None, path_regex: str = "") -> list[RecordedRequest]:
        pattern = re.compile(path_regex)
        return [r for r in self.requests if (method is None or r.method == method) and pattern.search(r.path)]

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    # ---- routing -----------------------------------------------------------------------------------------
    def _route(self, path: str) -> _Route | dict[str, Any]:
        """Resolve a path to a resource route, or return a discovery document."""
        segs = [s for s in path.split("/") if s]
        if segs == ["version"]:
            return {
                "major": "1",
                "minor": "33",
                "gitVersion": "v1.33.0-tessera-fake",
                "platform": "linux/amd64",
            }
        if segs == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if segs == ["apis"]:
            groups: dict[str, set[str]] = {}
            for rt in self.store.types.values():
                if rt.group:
                    groups.setdefault(rt.group, set()).add(rt.version)
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": g,
                        "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in sorted(vs)],
                        "preferredVersion": {
                            "groupVersion": f"{g}/{sorted(vs)[0]}",
                            "version": sorted(vs)[0],
                        },
                    }
                    for g, vs in sorted(groups.items())
                ],
            }
        if len(segs) >= 2 and segs[0] == "api":
            group, version, rest = "", segs[1], segs[2:]
        elif len(segs) >= 3 and segs[0] == "apis":
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            raise ApiError(404, "the server could not find the requested resource")
        if not rest:
            resources = [
                {
                    "name": rt.plural,
                    "kind": rt.kind,
                    "namespaced": rt.namespaced,
                    "verbs": [
                        "create",
                        "delete",
                        "deletecollection",
                        "get",
                        "list",
                        "patch",
                        "update",
                        "watch",
                    ],
                }
                for rt in self.store.types.values()
                if rt.group == group and rt.version == version
            ]
            if not resources:
                raise ApiError(404, "the server could not find the requested resource")
            gv = f"{group}/{version}" if group else version
            return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] in self.store.plurals(group, version):
            rt = self.store.lookup(group, version, rest[2])
            if rt.namespaced:
                namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise ApiError(404, "the server could not find the requested resource")
        rt = self.store.lookup(group, version, rest[0])
        if namespace is None and rt.namespaced and len(rest) > 1:
            raise ApiError(404, "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        allowed_subs = {"status"} if rt.status_subresource else set()
        if rt.key == ("", "pods"):
            allowed_subs |= {"binding", "eviction"}
        if sub is not None and sub not in allowed_subs:
            raise ApiError(404, "the server could not find the requested resource")
        return _Route(rt, namespace, name, sub)

    def _matcher(self, route: _Route, query: dict[str, list[str]]) -> Callable[[Obj], bool]:
        try:
            labels = parse_label_selector(_q(query, "labelSelector") or "")
            fields = parse_field_selector(_q(query, "fieldSelector") or "", route.rt.field_labels)
        except SelectorError as exc:
            raise ApiError(400, str(exc)) from None
        ns = route.namespace

        def match(obj: Obj) -> bool:
            meta = obj.get("metadata", {})
            return (
                (ns is None or meta.get("namespace") == ns)
                and labels(meta.get("labels") or {})
                and fields(obj)
            )

        return match

    def _dispatch(
        self, method: str, route: _Route, query: dict[str, list[str]], body: Any, content_type: str | None
    ) -> tuple[int, Any]:
        rt, ns, name, sub = route.rt, route.namespace, route.name, route.subresource
        not_allowed = ApiError(
            405, f"the server does not allow this method on the requested resource ({method})"
        )
        if name is None:  # the collection
            if method == "GET":
                return 200, self._list(route, query)
            if method == "POST":
                return 201, self.store.create(rt, ns, body, dry_run=_q(query, "dryRun") == "All")
            if method == "DELETE":
                items, _ = self.store.select(rt, ns, self._matcher(route, query))
                for item in items:
                    self.store.delete(rt, item["metadata"].get("namespace"), item["metadata"]["name"], body)
                return 200, self._list_body(rt, items, self.store.rv)
            raise not_allowed
        if sub in ("binding", "eviction"):  # pods only (the router checked)
            if method != "POST":
                raise not_allowed
            if sub == "binding":
                self.store.bind(ns or "", name, body)
            elif not isinstance(body, dict) or body.get("kind") not in (None, "Eviction"):
                raise ApiError(400, "the body of an eviction must be a policy/v1 Eviction")
            else:
                self.store.evict(ns or "", name, body)
            return 201, success_status()
        if method == "GET":
            return 200, self.store.get(rt, ns, name)
        if method == "PUT":
            return 200, self.store.replace(rt, ns, name, body, sub)
        if method == "PATCH":
            return 200, self.store.patch(rt, ns, name, (content_type or "").split(";")[0].strip(), body, sub)
        if method == "DELETE" and sub is None:
            return 200, self.store.delete(rt, ns, name, body)
        raise not_allowed

    def _list(self, route: _Route, query: dict[str, list[str]]) -> dict[str, Any]:
        items, rv = self.store.select(route.rt, route.namespace, self._matcher(route, query))
        limit = int(_q(query, "limit") or 0)
        token = _q(query, "continue")
        start = 0
        if token:
            try:
                start, rv = (int(x) for x in base64.urlsafe_b64decode(token.encode()).decode().split(":"))
            except ValueError:
                raise ApiError(400, "continue key is not valid") from None
        page = items[start : start + limit] if limit else items[start:]
        body = self._list_body(route.rt, page, rv)
        if limit and start + limit < len(items):
            body["metadata"]["continue"] = base64.urlsafe_b64encode(f"{start + limit}:{rv}".encode()).decode()
            body["metadata"]["remainingItemCount"] = len(items) - start - limit
        return body

    @staticmethod
    def _list_body(rt: ResourceType, items: list[Obj], rv: int) -> dict[str, Any]:
        if rt.builtin:
            # The real server leaves kind/apiVersion off the items of built-in lists.
            items = [{k: v for k, v in i.items() if k not in ("kind", "apiVersion")} for i in items]
        return {
            "kind": rt.list_kind,
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(rv)},
            "items": items,
        }


def _q(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Keep-alive responses must not wait for Nagle's algorithm (~40 ms per request otherwise).
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def handle(self) -> None:
        # A client that hangs up (a stopped watch, a closed pool) is normal, not an error to print.
        with contextlib.suppress(ConnectionResetError, BrokenPipeError, TimeoutError):
            super().handle()

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        api = self.server.api
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        content_type = self.headers.get("Content-Type")
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body: Any = None
        watch_route: _Route | None = None
        try:
            if raw:
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise ApiError(
                        400, f"the body of the request could not be decoded as JSON: {exc}"
                    ) from None
            injected = api._take_injected(method, url.path)
            if injected is not None:
                raise injected
            routed = api._route(url.path)
            if isinstance(routed, dict):
                status, payload = 200, routed
            elif method == "GET" and routed.name is None and _q(query, "watch") in ("true", "1"):
                api._matcher(routed, query)  # selector errors answer 400 before the stream starts
                rv = _q(query, "resourceVersion")
                if rv not in (None, "", "0") and not str(rv).isdigit():
                    raise ApiError(400, f"resourceVersion: Invalid value: {rv!r}")
                status, payload, watch_route = 200, None, routed
            else:
                status, payload = api._dispatch(method, routed, query, body, content_type)
        except ApiError as exc:
            status, payload = exc.code, exc.status()
        # Logged before answering, so a client that got its answer always finds its request in the log.
        api._record(RecordedRequest(method, url.path, query, content_type, body, status))
        try:
            if watch_route is not None:
                self._watch(watch_route, query)
            else:
                self._send_json(status, payload)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send_json(self, code: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # ---- watch -------------------------------------------------------------------------------------------
    def _chunk(self, event_type: str, obj: Obj) -> None:
        data = json.dumps({"type": event_type, "object": obj}).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _watch(self, route: _Route, query: dict[str, list[str]]) -> None:
        api = self.server.api
        store = api.store
        match = api._matcher(route, query)
        rv_param = _q(query, "resourceVersion")
        timeout = _q(query, "timeoutSeconds")
        deadline = time.monotonic() + float(timeout) if timeout else None
        bookmarks = _q(query, "allowWatchBookmarks") in ("true", "1")
        generation = api._watch_generation
        bookmark_generation = api._bookmark_generation
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            if rv_param in (None, "", "0"):
                # "Start at most recent": synthetic ADDED events for the current state, then changes.
                items, cursor = store.select(route.rt, route.namespace, match)
                for item in items:
                    self._chunk("ADDED", item)
            else:
                cursor = int(rv_param)
            last_bookmark = time.monotonic()
            while not api._stopping and generation == api._watch_generation:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                with store.cond:
                    try:
                        events, current = store.events_after(cursor)
                        if not events:
                            store.cond.wait(0.1)
                            events, current = store.events_after(cursor)
                    except ApiError as exc:
                        self._chunk("ERROR", exc.status())
                        break
                if api._stopping or generation != api._watch_generation:
                    break  # dropped: a dropped connection delivers nothing more (the client resumes)
                for event in events:
                    self._send_event(route, event, match)
                cursor = current
                now = time.monotonic()
                if bookmarks and (
                    now - last_bookmark >= api.bookmark_interval
                    or bookmark_generation != api._bookmark_generation
                ):
                    bookmark_generation = api._bookmark_generation
                    last_bookmark = now
                    self._chunk(
                        "BOOKMARK",
                        {
                            "kind": route.rt.kind,
                            "apiVersion": route.rt.api_version,
                            "metadata": {"resourceVersion": str(cursor)},
                        },
                    )
                if not events and self._client_gone():
                    self.close_connection = True
                    return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        self.close_connection = True

    def _send_event(self, route: _Route, event: WatchEvent, match: Callable[[Obj], bool]) -> None:
        if event.key != route.rt.key:
            return
        now_ok = match(event.obj)
        was_ok = event.old is not None and match(event.old)
        kind: str | None
        if event.type == "ADDED":
            kind = "ADDED" if now_ok else None
        elif event.type == "DELETED":
            kind = "DELETED" if was_ok else None
        elif now_ok and was_ok:
            kind = "MODIFIED"
        elif now_ok:
            kind = "ADDED"
        elif was_ok:
            kind = "DELETED"  # the object left the selection: watchers see it go, as on a real server
        else:
            kind = None
        if kind is not None:
            self._chunk(kind, copy.deepcopy(event.obj))
