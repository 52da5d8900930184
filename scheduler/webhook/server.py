"""The webhook's HTTPS server (stdlib http.server + ssl).

POST /mutate and /validate (also as /mutate-pods and /validate-pods, the chart's paths) take an
AdmissionReview and answer one (the mutating configuration's endpoint also refuses; /validate never
patches). GET /healthz answers "ok". Bodies that are not JSON
get 400; nothing a client sends can stop the server.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from scheduler.webhook.admission import AdmissionConfig, admit

log = logging.getLogger(__name__)

MAX_BODY = 8 * 1024 * 1024


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    config: AdmissionConfig


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("webhook: " + format, *args)

    def _send(self, code: int, payload: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        if self.path.split("?")[0] in ("/healthz", "/readyz"):
            self._send(200, b"ok", "text/plain")
        else:
            self._send(404, b"not found", "text/plain")

    def do_POST(self) -> None:
        path = self.path.split("?")[0].removesuffix("-pods")
        length = int(self.headers.get("Content-Length") or 0)
        if path not in ("/mutate", "/validate"):
            self.rfile.read(min(length, MAX_BODY))
            self._send(404, b"not found", "text/plain")
            return
        if length > MAX_BODY:
            self.close_connection = True
            self._send(413, b"request too large", "text/plain")
            return
        try:
            review = json.loads(self.rfile.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            self._send(400, f"body is not JSON: {exc}".encode(), "text/plain")
            return
        answer = admit(review, self.server.config)
        if path == "/validate":
            answer["response"].pop("patch", None)
            answer["response"].pop("patchType", None)
        result = answer["response"]
        if not result["allowed"]:
            log.info("refused %s: %s", result.get("uid"), result["status"]["message"])
        self._send(200, json.dumps(answer).encode())


class WebhookServer:
    def __init__(
        self,
        config: AdmissionConfig,
        *,
        certfile: str | None,
        keyfile: str | None,
        host: str = "0.0.0.0",
        port: int = 8443,
    ) -> None:
        self.server = _Server((host, port), _Handler)
        self.server.config = config
        if certfile:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(certfile, keyfile)
            # The handshake runs in the handler thread, so a stalled client cannot block accept().
            self.server.socket = context.wrap_socket(
                self.server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> WebhookServer:
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, name="webhook", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
