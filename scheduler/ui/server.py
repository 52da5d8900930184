"""Serving the dashboard: `ui_response` for any HTTP server (the scheduler's metrics port mounts it at
/ui), and `serve_ui`, a dashboard-only server for demos and tests.

Read-only by construction: GET and HEAD only, no query parameter changes state, and the view holds no
secrets (pod and queue names and numbers; never annotations, env or tokens). The page loads nothing: its
Content-Security-Policy allows only its own inline style and, by hash, its own inline script, and lets it
connect only to its own origin (the live refresh GETs the page again).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import parse_qs, urlsplit

from scheduler.api.report import GPUNodeReport
from scheduler.api.serving import Handler, KeptServer, Request, Response, ServerLimits, text
from scheduler.cycle import Scheduler
from scheduler.ui.build import build_view
from scheduler.ui.page import asset, render_dashboard
from scheduler.ui.view import DashboardView

log = logging.getLogger(__name__)

ViewSource = Callable[[], DashboardView]
UI_PATH = "/ui"


def _script_hash() -> str:
    # The template wraps the script in newlines; the hash covers exactly the element's text.
    digest = hashlib.sha256(("\n" + asset("dashboard.js") + "\n").encode()).digest()
    return "sha256-" + base64.b64encode(digest).decode()


def security_headers() -> dict[str, str]:
    return {
        "Content-Security-Policy": (
            # connect-src 'self': the page's live refresh GETs the page itself, nothing else.
            f"default-src 'none'; script-src '{_script_hash()}'; style-src 'unsafe-inline'; connect-src 'self'; "
            "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        ),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }


@dataclass(frozen=True)
class UIResponse:
    status: int
    content_type: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def _text(status: int, message: str) -> UIResponse:
    return UIResponse(status, "text/plain; charset=utf-8", (message + "\n").encode(), security_headers())


def ui_response(path: str, view_source: ViewSource) -> UIResponse | None:
    """The answer to a GET of `path`, or None when the path is not the UI's (let the caller answer).

    /ui                 the dashboard (?fold=on|off folds identical nodes; default: when many)
    /ui/view.json       the same view-model as JSON
    """
    url = urlsplit(path)
    if url.path != UI_PATH and not url.path.startswith(UI_PATH + "/"):
        return None
    if url.path not in (UI_PATH, UI_PATH + "/", UI_PATH + "/view.json"):
        return _text(404, f"no such page: {url.path} (try {UI_PATH})")
    fold_arg = (parse_qs(url.query).get("fold") or ["auto"])[0]
    if fold_arg not in ("auto", "on", "off"):
        return _text(400, f"fold must be auto, on or off, not {fold_arg!r}")
    try:
        view = view_source()
    except Exception as exc:  # a page must never take the scheduler down; say what failed
        log.exception("building the dashboard view failed")
        return _text(500, f"the dashboard could not be built: {type(exc).__name__}: {exc}")
    if url.path.endswith("view.json"):
        body = json.dumps(dataclasses.asdict(view), separators=(",", ":")).encode()
        return UIResponse(200, "application/json", body, security_headers())
    aggregate = None if fold_arg == "auto" else fold_arg == "on"
    html = render_dashboard(view, aggregate=aggregate)
    return UIResponse(200, "text/html; charset=utf-8", html.encode(), security_headers())


def scheduler_view_source(
    scheduler: Scheduler,
    reports: Callable[[], Iterable[GPUNodeReport]] | None = None,
    lock: AbstractContextManager[object] | None = None,
    title: str = "Tessera cluster",
) -> ViewSource:
    """A view source reading a live scheduler; `lock` (the loop's) makes each view one consistent cycle."""

    def source() -> DashboardView:
        with lock or nullcontext():
            return build_view(scheduler, reports() if reports else (), title=title)

    return source


def ui_handler(view_source: ViewSource) -> Handler:
    def handle(req: Request) -> Response:
        if req.method not in ("GET", "HEAD"):
            return text(405, "method not allowed: the dashboard is read-only", {"Allow": "GET, HEAD"})
        if req.path in ("", "/"):
            return Response(302, b"", "text/plain", {"Location": UI_PATH})
        resp = ui_response(req.path_qs, view_source) or _text(404, f"not found (try {UI_PATH})")
        return Response(resp.status, resp.body, resp.content_type, resp.headers)

    return handle


class UIServer:
    """A running dashboard server (the kept server: timeouts, a connection cap); stop it with `close()` or
    use it as a context manager."""

    def __init__(
        self, view_source: ViewSource, host: str, port: int, *, limits: ServerLimits | None = None
    ) -> None:
        self._host = host
        self._server = KeptServer(
            ui_handler(view_source), host, port, limits=limits, name="tessera-ui", server_header="tessera-ui"
        )
        self._server.start()

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}{UI_PATH}"

    def close(self) -> None:
        self._server.stop()

    def __enter__(self) -> UIServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def serve_ui(
    scheduler: Scheduler,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    reports: Callable[[], Iterable[GPUNodeReport]] | None = None,
    lock: AbstractContextManager[object] | None = None,
) -> UIServer:
    """Serve the dashboard of `scheduler` in a background thread (port 0 = any free port)."""
    return UIServer(scheduler_view_source(scheduler, reports, lock), host, port)
