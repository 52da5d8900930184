"""The agent's HTTP endpoints: /metrics (Prometheus), /report (JSON) and /healthz, on the kept server
(`scheduler/api/serving.py`: timeouts, a connection cap, an answer to every malformed request)."""

from __future__ import annotations

import time

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from node_agent.agent import Agent
from node_agent.report import report_json
from scheduler.api.serving import KeptServer, Request, Response, ServerLimits, text


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT` (or `:PORT` for all interfaces) -> (host, port); ValueError with a clear line."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen expects HOST:PORT (e.g. 0.0.0.0:9400), got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def make_server(
    agent: Agent, host: str, port: int, *, stale_after_s: float = 10.0, limits: ServerLimits | None = None
) -> KeptServer:
    """The agent's server, not started yet (`serve_in_background` starts it; OSError if it cannot listen)."""

    def handle(req: Request) -> Response:
        if req.method not in ("GET", "HEAD"):
            return text(405, "method not allowed", {"Allow": "GET, HEAD"})
        if req.path == "/metrics":
            return Response(200, generate_latest(agent.metrics.registry), CONTENT_TYPE_LATEST)
        if req.path == "/report":
            if agent.latest is None:
                return text(503, "no report yet")
            return Response(200, report_json(agent.latest).encode(), "application/json")
        if req.path == "/healthz":
            fresh = agent.last_tick is not None and time.monotonic() - agent.last_tick <= stale_after_s
            return text(200, "ok") if fresh else text(503, "no recent collection round")
        return text(404, "not found: try /metrics, /report or /healthz")

    return KeptServer(
        handle, host, port, limits=limits, name="tessera-agent-http", server_header="tessera-agent"
    )


def serve_in_background(server: KeptServer) -> KeptServer:
    return server.start()
