"""The HTTP server every Tessera endpoint runs on: the webhook, /metrics, /healthz, the dashboard and the
node agent's port. It lives here because the scheduler and the node agent both use it (they share only
`scheduler/api`).

It is aiohttp's low-level server on an event loop in one background thread, so an idle or slow client
costs a socket, never a thread (`http.server` gave each connection a thread, and 300 idle connections
pinned 300 of them). The loop only reads and writes; the handlers, plain blocking functions, run on a
small thread pool. aiohttp is already installed (the Kubernetes client depends on it), so this adds no
dependency; uvicorn + starlette would have added two and an ASGI layer for four URLs.

Limits (`ServerLimits`), each answered rather than dropped where HTTP allows:
* a connection that has not sent a complete request within `idle_timeout_s` of opening (or of its last
  answer) is closed: this ends slowloris-style trickled headers as well as idle keep-alive connections;
* reading a body and answering a request takes at most `request_timeout_s` (else 408 or 503);
* at most `max_connections` connections at once: the next one is answered 503 and closed;
* bodies above `max_body_bytes` get 413; a request that is not HTTP gets aiohttp's 400;
* a handler that raises gets 500 with a one-line reason (and the trace in the log).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerLimits:
    idle_timeout_s: float = 15.0
    request_timeout_s: float = 30.0
    max_connections: int = 512
    max_body_bytes: int = 8 * 1024 * 1024
    workers: int = 4


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query
    query: Mapping[str, str]
    path_qs: str  # path and query, as sent
    headers: Mapping[str, str]
    body: bytes = b""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: Mapping[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Response]

_FULL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 33\r\n"
    b"Connection: close\r\n\r\ntoo many connections; try again\r\n"
)


class _Refuse(asyncio.Protocol):
    """A connection over the cap: answer 503, read and drop what the client sends (closing on unread
    input would reset the connection and lose the answer), close when it does or after a second."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(_FULL)
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(1.0, transport.close)

    def data_received(self, data: bytes) -> None:
        pass


class _CappedServer(web.Server):
    """aiohttp's server with a cap on open connections (one more is answered 503 and closed) and a
    deadline for the first request: a connection that has not sent one complete request within
    `first_request_s` is closed. (aiohttp closes idle keep-alive connections after an answer itself, and
    recent releases also idle new ones; the deadline here does not depend on the release.)"""

    def __init__(self, handler: Any, *, max_connections: int, first_request_s: float, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.max_connections = max_connections
        self.first_request_s = first_request_s
        self.refused = 0
        self.answered: set[Any] = set()  # open connections that sent a request

    def __call__(self) -> Any:  # the protocol factory the listening socket calls per connection
        if len(self._connections) >= self.max_connections:
            self.refused += 1
            return _Refuse()
        return super().__call__()

    def connection_made(self, handler: Any, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        asyncio.get_running_loop().call_later(self.first_request_s, self._deadline, handler)

    def connection_lost(self, handler: Any, exc: BaseException | None = None) -> None:
        super().connection_lost(handler, exc)
        self.answered.discard(handler)

    def _deadline(self, handler: Any) -> None:
        if handler in self._connections and handler not in self.answered:
            handler.force_close()


class KeptServer:
    """Serve `handler` on host:port (port 0: any free port) until `stop()`; HTTPS with `ssl_context`."""

    def __init__(
        self,
        handler: Handler,
        host: str,
        port: int,
        *,
        limits: ServerLimits | None = None,
        ssl_context: ssl.SSLContext | None = None,
        name: str = "http",
        server_header: str = "tessera",
    ) -> None:
        self.limits = limits or ServerLimits()
        self._handler = handler
        self._address = (host, port)
        self._ssl = ssl_context
        self._name = name
        self._server_header = server_header
        self._pool = ThreadPoolExecutor(max_workers=self.limits.workers, thread_name_prefix=f"{name}-worker")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._server: _CappedServer | None = None
        self._listener: asyncio.Server | None = None
        self.port = 0

    # ---- life cycle --------------------------------------------------------------------------------
    def start(self) -> KeptServer:
        """Listen and serve; OSError (port taken, address not here) leaves nothing running."""
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._open(), self._loop).result(timeout=10)
        except BaseException:
            self._halt()
            raise
        return self

    async def _open(self) -> None:
        limits = self.limits
        self._server = _CappedServer(
            self._serve,
            max_connections=limits.max_connections,
            first_request_s=limits.idle_timeout_s,
            keepalive_timeout=limits.idle_timeout_s,
        )
        self._listener = await self._loop.create_server(
            self._server,
            *self._address,
            ssl=self._ssl,
            ssl_handshake_timeout=limits.idle_timeout_s if self._ssl else None,
            backlog=min(limits.max_connections, 1024),
            reuse_address=True,
        )
        self.port = int(self._listener.sockets[0].getsockname()[1])

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        finally:
            self._halt()

    def _halt(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        if self._server is not None:
            await self._server.shutdown(1.0)
        if self._listener is not None:
            await self._listener.wait_closed()

    def __enter__(self) -> KeptServer:
        return self.start() if not self._thread.is_alive() else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def open_connections(self) -> int:
        return len(self._server.connections) if self._server is not None else 0

    @property
    def refused_connections(self) -> int:
        return self._server.refused if self._server is not None else 0

    # ---- one request -------------------------------------------------------------------------------
    async def _serve(self, request: web.BaseRequest) -> web.StreamResponse:
        if self._server is not None:
            self._server.answered.add(request.protocol)
        try:
            async with asyncio.timeout(self.limits.request_timeout_s):
                body = await self._body(request)
                if isinstance(body, web.Response):
                    return body
                answer = await self._loop.run_in_executor(self._pool, self._call, request, body)
        except TimeoutError:
            return self._text(408 if not request.content.is_eof() else 503, "request timed out")
        resp = web.Response(status=answer.status, body=answer.body, headers=dict(answer.headers))
        resp.content_type, _, charset = answer.content_type.partition("; charset=")
        if charset:
            resp.charset = charset
        resp.headers["Server"] = self._server_header
        return resp

    async def _body(self, request: web.BaseRequest) -> bytes | web.Response:
        if request.content_length is not None and request.content_length > self.limits.max_body_bytes:
            return self._text(413, f"request body over {self.limits.max_body_bytes} bytes", close=True)
        chunks: list[bytes] = []
        size = 0
        while chunk := await request.content.readany():
            size += len(chunk)
            if size > self.limits.max_body_bytes:
                return self._text(413, f"request body over {self.limits.max_body_bytes} bytes", close=True)
            chunks.append(chunk)
        return b"".join(chunks)

    def _call(self, request: web.BaseRequest, body: bytes) -> Response:
        req = Request(
            method=request.method,
            path=request.path,
            query={k: v for k, v in request.query.items()},
            path_qs=request.path_qs,
            headers={k: v for k, v in request.headers.items()},
            body=body,
        )
        try:
            return self._handler(req)
        except Exception as exc:  # one bad request must not take the endpoint down
            log.exception("%s: %s %s failed", self._name, request.method, request.path)
            return Response(500, f"internal error: {type(exc).__name__}\n".encode())

    def _text(self, status: int, message: str, *, close: bool = False) -> web.Response:
        resp = web.Response(status=status, text=message + "\n", headers={"Server": self._server_header})
        if close:
            resp.force_close()
        return resp


def text(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    """A plain-text answer (a newline added)."""
    return Response(status, (message + "\n").encode(), "text/plain; charset=utf-8", dict(headers or {}))
