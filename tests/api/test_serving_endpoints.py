"""Each of Tessera's HTTP servers (webhook, scheduler port, dashboard, node agent) under the hostile
clients: idle floods pin no threads and do not stop a real request, trickled headers time out, garbage
gets an answer. (With `http.server` each idle connection took a thread and none ever timed out.)"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from node_agent.agent import Agent
from node_agent.http import make_server, serve_in_background
from node_agent.nvml.fake import FakeNVML
from scheduler.api.serving import ServerLimits
from scheduler.kube.http_server import SchedulerHTTPServer
from scheduler.ui.server import UIServer, scheduler_view_source
from scheduler.webhook.admission import AdmissionConfig
from scheduler.webhook.server import WebhookServer
from tests.api.hostile_clients import get, raw_exchange, slowloris_lasts, threads_while_idle
from tests.ui.scenario import small_cluster

FAST = ServerLimits(idle_timeout_s=1.0, request_timeout_s=5.0)


@dataclass
class Endpoint:
    port: int
    path: str  # a GET that answers 200
    stop: Callable[[], None]
    context: ssl.SSLContext | None = None

    def get(self) -> tuple[int, bytes]:
        return get(self.port, self.path, scheme="https" if self.context else "http", context=self.context)


def _cert(tmp: Path) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp / "tls.crt", tmp / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return str(cert), str(key)


def _webhook(tmp: Path) -> Endpoint:
    cert, key = _cert(tmp)
    srv = WebhookServer(AdmissionConfig(), certfile=cert, keyfile=key, host="127.0.0.1", port=0, limits=FAST)
    srv.start()
    return Endpoint(srv.port, "/healthz", srv.stop, ssl.create_default_context(cafile=cert))


def _scheduler(_tmp: Path) -> Endpoint:
    srv = SchedulerHTTPServer(CollectorRegistry(), host="127.0.0.1", port=0, limits=FAST).start()
    return Endpoint(srv.port, "/metrics", srv.stop)


def _dashboard(_tmp: Path) -> Endpoint:
    _, sched = small_cluster()
    srv = UIServer(scheduler_view_source(sched), "127.0.0.1", 0, limits=FAST)
    return Endpoint(srv.port, "/ui", srv.close)


def _agent(_tmp: Path) -> Endpoint:
    agent = Agent("n1", FakeNVML("2xA100-40GB", seed="n1"))
    agent.tick()
    srv = serve_in_background(make_server(agent, "127.0.0.1", 0, limits=FAST))
    return Endpoint(srv.port, "/healthz", srv.stop)


SERVERS = {"webhook": _webhook, "scheduler": _scheduler, "dashboard": _dashboard, "agent": _agent}


@pytest.fixture(params=sorted(SERVERS))
def endpoint(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Endpoint]:
    ep = SERVERS[request.param](tmp_path)
    try:
        yield ep
    finally:
        ep.stop()


def test_300_idle_connections_pin_no_threads_and_a_real_request_is_answered(endpoint: Endpoint) -> None:
    grown, status, _ = threads_while_idle("127.0.0.1", endpoint.port, 300, endpoint.get)
    assert grown < 5, f"300 idle connections started {grown} threads"
    assert status == 200


def test_a_slowloris_client_is_cut_off(endpoint: Endpoint) -> None:
    lasted = slowloris_lasts("127.0.0.1", endpoint.port, every_s=0.2, give_up_s=8, context=endpoint.context)
    assert lasted < 3


def test_garbage_gets_an_answer_and_the_server_goes_on(endpoint: Endpoint) -> None:
    if endpoint.context is None:
        assert raw_exchange("127.0.0.1", endpoint.port, b"\x00\x01garbage\r\n\r\n").startswith(b"HTTP/1.")
    else:  # plain text on the TLS port: the handshake fails, the connection is closed, nothing hangs
        assert raw_exchange("127.0.0.1", endpoint.port, b"GET / HTTP/1.1\r\n\r\n") is not None
    assert endpoint.get()[0] == 200
