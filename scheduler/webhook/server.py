"""The webhook's HTTPS server, on the kept server (`scheduler/api/serving.py`: timeouts, a connection cap).

POST /mutate and /validate (also as /mutate-pods, /validate-pods and /validate-podgroups, the chart's
paths) take an
AdmissionReview and always answer one, with HTTP 200 as the API server expects, even for a body that is
not JSON or not a review (refused with code 400 and the reason; the mutating configuration's endpoint
also refuses; /validate never patches). GET /healthz and /readyz answer "ok". Nothing a client sends can
stop the server or go unanswered.
"""

from __future__ import annotations

import json
import logging
import ssl

from scheduler.api.serving import Handler, KeptServer, Request, Response, ServerLimits, text
from scheduler.webhook.admission import AdmissionConfig, admit
from scheduler.webhook.review import response

log = logging.getLogger(__name__)

REVIEW_PATHS = ("/mutate", "/validate")


def webhook_handler(config: AdmissionConfig) -> Handler:
    """The request handler (a function of `Request`), exposed for tests that skip the socket."""

    def handle(req: Request) -> Response:
        path = req.path.removesuffix("-pods").removesuffix("-podgroups")
        if req.method in ("GET", "HEAD"):
            if req.path in ("/healthz", "/readyz"):
                return Response(200, b"ok", "text/plain")
            return text(404, "not found")
        if req.method != "POST":
            return text(405, "method not allowed: POST an AdmissionReview", {"Allow": "POST"})
        if path not in REVIEW_PATHS:
            return text(404, f"not found: POST to {' or '.join(REVIEW_PATHS)}")
        try:
            review = json.loads(req.body)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            answer = response(
                "", allowed=False, code=400, message=f"malformed AdmissionReview: body is not JSON ({exc})"
            )
        else:
            answer = admit(review, config)
        result = answer["response"]
        if path == "/validate":
            result.pop("patch", None)
            result.pop("patchType", None)
        if not result["allowed"]:
            log.info("refused %s: %s", result.get("uid"), result["status"]["message"])
        return Response(200, json.dumps(answer).encode(), "application/json")

    return handle


class WebhookServer:
    def __init__(
        self,
        config: AdmissionConfig,
        *,
        certfile: str | None,
        keyfile: str | None,
        host: str = "0.0.0.0",
        port: int = 8443,
        limits: ServerLimits | None = None,
    ) -> None:
        context = None
        if certfile:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(certfile, keyfile)
        self.server = KeptServer(
            webhook_handler(config), host, port, limits=limits, ssl_context=context, name="webhook"
        )

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> WebhookServer:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
