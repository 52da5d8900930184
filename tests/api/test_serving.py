"""The kept server under hostile clients: idle floods, trickled headers, slow bodies, too many connections,
garbage, a handler that raises. Every Tessera HTTP endpoint runs on it (tests/webhook, tests/agent and
tests/ui check each one's wiring over the same clients in `tests/api/hostile_clients.py`)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from scheduler.api.serving import KeptServer, Request, Response, ServerLimits, text
from tests.api.hostile_clients import (
    get,
    idle_connections,
    raw_exchange,
    slowloris_lasts,
    threads_while_idle,
)


def handler(req: Request) -> Response:
    if req.path == "/boom":
        raise RuntimeError("handler bug")
    if req.path == "/slow":
        time.sleep(2)
    return text(200, f"{req.method} {req.path_qs} {len(req.body)}")


@pytest.fixture
def server() -> Iterator[KeptServer]:
    limits = ServerLimits(idle_timeout_s=1.0, request_timeout_s=1.0, max_connections=400, max_body_bytes=1024)
    with KeptServer(handler, "127.0.0.1", 0, limits=limits).start() as srv:
        yield srv


def test_idle_connections_pin_no_threads_and_do_not_block_a_real_request(server: KeptServer) -> None:
    grown, status, body = threads_while_idle("127.0.0.1", server.port, 300, lambda: get(server.port, "/x"))
    assert grown < 5, f"300 idle connections started {grown} threads"
    assert (status, body) == (200, b"GET /x 0\n")


def test_idle_connections_are_closed_after_the_idle_timeout(server: KeptServer) -> None:
    with idle_connections("127.0.0.1", server.port, 50) as socks:
        time.sleep(0.3)
        assert server.open_connections == 50
        deadline = time.monotonic() + 5
        while server.open_connections and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.open_connections == 0
        assert all(s.recv(1) == b"" for s in socks)  # closed by the server


def test_trickled_headers_time_out(server: KeptServer) -> None:
    lasted = slowloris_lasts("127.0.0.1", server.port, every_s=0.2, give_up_s=6)
    assert lasted < 3, f"a slowloris client kept its connection for {lasted:.1f}s"


def test_a_slow_body_gets_408(server: KeptServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        s.settimeout(5)
        assert s.recv(100).startswith(b"HTTP/1.1 408")


def test_a_slow_handler_gets_503_and_the_server_stays_up(server: KeptServer) -> None:
    assert get(server.port, "/slow")[0] == 503
    assert get(server.port, "/x")[0] == 200


def test_too_many_connections_are_answered_503() -> None:
    limits = ServerLimits(idle_timeout_s=5.0, max_connections=5)
    with KeptServer(handler, "127.0.0.1", 0, limits=limits).start() as srv:
        with idle_connections("127.0.0.1", srv.port, 5):
            time.sleep(0.2)
            status, body = get(srv.port, "/x")
            assert status == 503 and b"too many connections" in body
            assert srv.refused_connections == 1
        deadline = time.monotonic() + 5
        while srv.open_connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert get(srv.port, "/x")[0] == 200  # room again once they left


@pytest.mark.parametrize(
    ("sent", "status"),
    [
        (b"BLAH\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", b"400"),
        (b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n", b"413"),
        (b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", b"4"),
        (b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 1000 + b"\r\n", b"4"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(200), b"400"),  # TLS on a plain port
        (b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n", b"500"),
    ],
)
def test_every_malformed_request_gets_an_answer(server: KeptServer, sent: bytes, status: bytes) -> None:
    answer = raw_exchange("127.0.0.1", server.port, sent)
    assert answer.split(b" ")[1].startswith(status), answer[:80]
    assert get(server.port, "/x")[0] == 200


def test_a_chunked_body_over_the_limit_gets_413(server: KeptServer) -> None:
    chunk = b"400\r\n" + b"a" * 1024 + b"\r\n"
    sent = b"POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk * 3 + b"0\r\n\r\n"
    assert raw_exchange("127.0.0.1", server.port, sent).startswith(b"HTTP/1.1 413")


def test_stop_releases_the_port_and_the_thread() -> None:
    srv = KeptServer(handler, "127.0.0.1", 0).start()
    port = srv.port
    before = threading.active_count()
    srv.stop()
    assert threading.active_count() < before
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1)


def test_a_taken_port_is_an_oserror_and_leaves_nothing_running() -> None:
    with KeptServer(handler, "127.0.0.1", 0).start() as first:
        before = threading.active_count()
        taken = KeptServer(handler, "127.0.0.1", first.port)
        with pytest.raises(OSError):
            taken.start()
        assert threading.active_count() <= before
        assert get(first.port, "/x")[0] == 200
