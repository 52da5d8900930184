"""A fault-injecting HTTPS reverse proxy in front of the real kube-apiserver.

Everything is forwarded to the real server (streamed, so watches flow event by event) except what a test
asks for, matched on the method and a regular expression over the path (and the `watch` query parameter):

    proxy.fail("POST", r"/pods/p/binding$", 500, "etcd timeout")   # the next matching request gets a 500
    proxy.slow("GET", r"/api/v1/nodes/", 2.0, times=3)              # answered 2 s late
    proxy.expire_watches(r"/api/v1/pods$")                          # next watch: ERROR 410 Expired
    proxy.drop_watches(r"/api/v1/pods$")                            # open watches end now (connection cut)

A fault answers with a `Status` body shaped as the real server's, so clients parse it as they would a real
refusal. Clients authenticate with bearer tokens (ServiceAccount tokens), which pass through unchanged, so
the real server still authenticates and authorizes every request; the proxy itself holds no credentials.
`requests` logs what went through (method, path, query, status, JSON body), as the server answered it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import yaml
from aiohttp import web
from kubernetes import client, config

from scheduler.sandbox.controlplane import ControlPlane

# Hop-by-hop headers (RFC 9110 7.6.1) and those aiohttp sets itself.
_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
        "transfer-encoding", "upgrade", "host", "content-length"}  # fmt: skip
_REASONS = {409: "Conflict", 410: "Expired", 429: "TooManyRequests", 500: "InternalError",
            503: "ServiceUnavailable", 504: "Timeout", 403: "Forbidden", 404: "NotFound"}  # fmt: skip


@dataclass(frozen=True)
class ProxiedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    status: int
    body: Any  # the request's JSON body (None when empty or not JSON)
    injected: bool  # answered by a fault, never reached the server

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None

    @property
    def watch(self) -> bool:
        return self.param("watch") in ("true", "1")


@dataclass
class _Rule:
    method: str  # "*" for any
    pattern: re.Pattern[str]
    watch: bool | None  # None: any request; True: watches only; False: never watches
    remaining: int
    code: int = 0  # answer with this status
    message: str = ""
    delay_s: float = 0.0  # or answer this late
    expire: bool = False  # or a watch that says 410 Expired

    def matches(self, method: str, path: str, watch: bool) -> bool:
        return (
            self.remaining > 0
            and self.method in ("*", method)
            and self.pattern.search(path) is not None
            and (self.watch is None or self.watch == watch)
        )


@dataclass
class _OpenWatch:
    path: str
    cut: asyncio.Event = field(default_factory=asyncio.Event)


def status_body(code: int, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": _REASONS.get(code, "Unknown"), "code": code}  # fmt: skip


class FaultProxy:
    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.port = 0
        self._rules: list[_Rule] = []
        self._log: list[ProxiedRequest] = []
        self._watches: list[_OpenWatch] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        serving = cp.ca.issue("fault-proxy", common_name="fault-proxy", hosts=("127.0.0.1",), server=True)
        self._server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._server_tls.load_cert_chain(str(serving.cert), str(serving.key))
        self._upstream_tls = ssl.create_default_context(cafile=str(cp.ca_file))

    # ---- lifecycle ---------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        self._loop.close()

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._upstream_tls, limit=64),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
        )
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._server_tls)
        await site.start()
        server = site._server  # the bound port of port 0
        assert server is not None and server.sockets
        self.port = int(server.sockets[0].getsockname()[1])

    async def _stop(self) -> None:
        for w in self._open_watches(".*"):
            w.cut.set()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    # ---- clients through the proxy -----------------------------------------------------------------------
    def kubeconfig(self, token: str, path: Path) -> Path:
        doc = {
            "apiVersion": "v1", "kind": "Config", "current-context": "proxy",
            "clusters": [{"name": "proxy", "cluster": {"server": self.url,
                                                       "certificate-authority": str(self.cp.ca_file)}}],
            "users": [{"name": "proxied", "user": {"token": token}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxied"}}],
        }  # fmt: skip
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        path.chmod(0o600)
        return path

    def client(self, token: str) -> client.ApiClient:
        """An ApiClient that reaches the real server through the proxy with `token`."""
        conf = client.Configuration()
        conf.host = self.url
        conf.ssl_ca_cert = str(self.cp.ca_file)
        conf.api_key = {"authorization": f"Bearer {token}"}
        return client.ApiClient(conf)

    @staticmethod
    def client_from_kubeconfig(path: Path) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(path))

    # ---- faults ------------------------------------------------------------------------------------------
    def _add(self, rule: _Rule) -> None:
        with self._lock:
            self._rules.append(rule)

    def fail(
        self, method: str, path_regex: str, code: int, message: str = "", *, times: int = 1,
        watch: bool | None = None,
    ) -> None:  # fmt: skip
        """Answer the next `times` matching requests with `code` and a Status body."""
        text = message or f"injected {code} by the test's fault proxy"
        self._add(_Rule(method, re.compile(path_regex), watch, times, code=code, message=text))

    def slow(self, method: str, path_regex: str, delay_s: float, *, times: int = 1) -> None:
        """Forward the next `times` matching requests `delay_s` late."""
        self._add(_Rule(method, re.compile(path_regex), None, times, delay_s=delay_s))

    def expire_watches(self, path_regex: str, *, times: int = 1) -> None:
        """The next `times` matching watches get what the real server sends once their resourceVersion was
        compacted away: HTTP 200 and one `ERROR` event with a 410 Expired Status."""
        self._add(_Rule("GET", re.compile(path_regex), True, times, expire=True))

    def drop_watches(self, path_regex: str = ".*") -> int:
        """Cut every open watch whose path matches (as a lost connection would); returns how many."""
        open_now = self._open_watches(path_regex)
        for w in open_now:
            self._loop.call_soon_threadsafe(w.cut.set)
        return len(open_now)

    def watching(self, path_regex: str = ".*") -> int:
        """How many watches matching the path are open now."""
        return len(self._open_watches(path_regex))

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def _open_watches(self, path_regex: str) -> list[_OpenWatch]:
        pattern = re.compile(path_regex)
        with self._lock:
            return [w for w in self._watches if pattern.search(w.path)]

    def _take(self, method: str, path: str, watch: bool) -> _Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.matches(method, path, watch):
                    rule.remaining -= 1
                    return rule
        return None

    # ---- the log -----------------------------------------------------------------------------------------
    @property
    def requests(self) -> list[ProxiedRequest]:
        with self._lock:
            return list(self._log)

    def requests_matching(self, method: str | None = None, path_regex: str = "") -> list[ProxiedRequest]:
        pattern = re.compile(path_regex)
        return [r for r in self.requests if (method in (None, r.method)) and pattern.search(r.path)]

    def clear_requests(self) -> None:
        with self._lock:
            self._log.clear()

    def _record(self, request: web.Request, status: int, body: bytes, injected: bool) -> None:
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        entry = ProxiedRequest(request.method, request.path, parse_qs(request.query_string), status, parsed,
                               injected)  # fmt: skip
        with self._lock:
            self._log.append(entry)

    # ---- forwarding --------------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        watch = request.query.get("watch") in ("true", "1")
        rule = self._take(request.method, request.path, watch)
        if rule is not None and rule.delay_s:
            await asyncio.sleep(rule.delay_s)
        elif rule is not None and rule.expire:
            self._record(request, 200, body, injected=True)
            return await self._expired_watch(request)
        elif rule is not None:
            self._record(request, rule.code, body, injected=True)
            return web.json_response(status_body(rule.code, rule.message), status=rule.code)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        assert self._session is not None
        upstream = await self._session.request(
            request.method,
            f"{self.cp.url}{request.rel_url}",
            headers=headers,
            data=body or None,
            # The kubernetes client sends JSON bodies without a Content-Type (the server reads them as
            # JSON); aiohttp would label them application/octet-stream, which the server refuses.
            skip_auto_headers=("Content-Type",),
        )
        self._record(request, upstream.status, body, injected=False)
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for k, v in upstream.headers.items():
            if k.lower() not in _HOP:
                response.headers[k] = v
        if not watch:
            data = await upstream.read()
            upstream.release()
            response.content_length = len(data)
            await response.prepare(request)
            await response.write(data)
            await response.write_eof()
            return response
        return await self._stream_watch(request, upstream, response)

    async def _stream_watch(
        self, request: web.Request, upstream: aiohttp.ClientResponse, response: web.StreamResponse
    ) -> web.StreamResponse:
        opened = _OpenWatch(request.path)
        with self._lock:
            self._watches.append(opened)
        cut = asyncio.ensure_future(opened.cut.wait())
        try:
            await response.prepare(request)
            while True:
                read = asyncio.ensure_future(upstream.content.readany())
                done, _ = await asyncio.wait({read, cut}, return_when=asyncio.FIRST_COMPLETED)
                if cut in done:
                    read.cancel()
                    # A lost connection: no clean end of the chunked stream, the socket just goes away.
                    if request.transport is not None:
                        request.transport.abort()
                    break
                chunk = read.result()
                if not chunk:
                    await response.write_eof()
                    break
                await response.write(chunk)
        except (ConnectionResetError, aiohttp.ClientError):
            pass  # the client went away, or the server ended the watch uncleanly
        finally:
            cut.cancel()
            upstream.close()
            with self._lock:
                self._watches.remove(opened)
        return response

    async def _expired_watch(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        rv = request.query.get("resourceVersion", "")
        event = {"type": "ERROR", "object": status_body(410, f"too old resource version: {rv}")}
        await response.write(json.dumps(event).encode() + b"\n")
        await response.write_eof()
        return response


@contextlib.contextmanager
def fault_proxy(cp: ControlPlane) -> Iterator[FaultProxy]:
    proxy = FaultProxy(cp).start()
    try:
        yield proxy
    finally:
        proxy.stop()
