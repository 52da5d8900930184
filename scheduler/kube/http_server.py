"""The scheduler's HTTP port: /metrics (Prometheus), /healthz and /readyz (probes; a standby is healthy
too, so it is not restarted), and the dashboard under /ui."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from scheduler.ui.server import ViewSource, ui_response

log = logging.getLogger(__name__)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    registry: CollectorRegistry
    view_source: ViewSource | None
    ready: Callable[[], bool]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "tessera-scheduler"
    sys_version = ""

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http %s: " + format, self.client_address[0], *args)

    def _send(
        self, status: int, content_type: str, body: bytes, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/metrics":
            self._send(200, CONTENT_TYPE_LATEST, generate_latest(self.server.registry))
        elif path == "/healthz":
            self._send(200, "text/plain", b"ok")
        elif path == "/readyz":
            ok = self.server.ready()
            self._send(200 if ok else 503, "text/plain", b"ok" if ok else b"watch caches not synced")
        else:
            resp = ui_response(self.path, self.server.view_source) if self.server.view_source else None
            if resp is None:
                self._send(404, "text/plain", b"not found: try /metrics, /healthz or /ui")
            else:
                self._send(resp.status, resp.content_type, resp.body, resp.headers)

    do_HEAD = do_GET


class SchedulerHTTPServer:
    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str = "0.0.0.0",
        port: int = 8080,
        view_source: ViewSource | None = None,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self._server = _Server((host, port), _Handler)
        self._server.registry = registry
        self._server.view_source = view_source
        self._server.ready = ready
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="scheduler-http", daemon=True)  # fmt: skip

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> SchedulerHTTPServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
