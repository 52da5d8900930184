"""The agent's HTTP endpoints: /metrics (Prometheus), /report (JSON) and /healthz."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from node_agent.agent import Agent
from node_agent.report import report_json


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT` (or `:PORT` for all interfaces) -> (host, port); ValueError with a clear line."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen expects HOST:PORT (e.g. 0.0.0.0:9400), got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def make_server(agent: Agent, host: str, port: int, *, stale_after_s: float = 10.0) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, generate_latest(agent.metrics.registry))
            elif path == "/report":
                if agent.latest is None:
                    self._send(503, "text/plain; charset=utf-8", b"no report yet\n")
                else:
                    self._send(200, "application/json", report_json(agent.latest).encode())
            elif path == "/healthz":
                fresh = agent.last_tick is not None and time.monotonic() - agent.last_tick <= stale_after_s
                if fresh:
                    self._send(200, "text/plain; charset=utf-8", b"ok\n")
                else:
                    self._send(503, "text/plain; charset=utf-8", b"no recent collection round\n")
            else:
                self._send(
                    404, "text/plain; charset=utf-8", b"not found: try /metrics, /report or /healthz\n"
                )

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # scrapes every few seconds would flood the log

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def serve_in_background(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="tessera-agent-http", daemon=True)
    thread.start()
    return thread
