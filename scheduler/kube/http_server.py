"""The scheduler's HTTP port: /metrics (Prometheus), /healthz and /readyz (probes; a standby is healthy
too, so it is not restarted), and the dashboard under /ui. Served by the kept server
(`scheduler/api/serving.py`: timeouts, a connection cap, an answer to every malformed request)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from scheduler.api.serving import Handler, KeptServer, Request, Response, ServerLimits, text
from scheduler.ui.server import ViewSource, ui_response


def scheduler_handler(
    registry: CollectorRegistry, view_source: ViewSource | None, ready: Callable[[], bool]
) -> Handler:
    def handle(req: Request) -> Response:
        if req.method not in ("GET", "HEAD"):
            return text(405, "method not allowed: this port is read-only", {"Allow": "GET, HEAD"})
        if req.path == "/metrics":
            return Response(200, generate_latest(registry), CONTENT_TYPE_LATEST)
        if req.path == "/healthz":
            return Response(200, b"ok", "text/plain")
        if req.path == "/readyz":
            ok = ready()
            return Response(200 if ok else 503, b"ok" if ok else b"watch caches not synced", "text/plain")
        resp = ui_response(req.path_qs, view_source) if view_source else None
        if resp is None:
            return text(404, "not found: try /metrics, /healthz or /ui")
        return Response(resp.status, resp.body, resp.content_type, resp.headers)

    return handle


class SchedulerHTTPServer:
    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str = "0.0.0.0",
        port: int = 8080,
        view_source: ViewSource | None = None,
        ready: Callable[[], bool] = lambda: True,
        limits: ServerLimits | None = None,
    ) -> None:
        handler = scheduler_handler(registry, view_source, ready)
        self._server = KeptServer(
            handler, host, port, limits=limits, name="scheduler-http", server_header="tessera-scheduler"
        )

    @property
    def port(self) -> int:
        return self._server.port

    def start(self) -> SchedulerHTTPServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()
