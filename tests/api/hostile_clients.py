"""Misbehaving HTTP clients, shared by the tests of every Tessera server."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


def get(
    port: int, path: str, *, scheme: str = "http", context: ssl.SSLContext | None = None
) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}{path}", timeout=10, context=context) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@contextlib.contextmanager
def idle_connections(host: str, port: int, count: int) -> Iterator[list[socket.socket]]:
    """`count` TCP connections that never send a byte."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.create_connection((host, port), timeout=10)
            socks.append(s)
        yield socks
    finally:
        for s in socks:
            s.close()


def threads_while_idle(host: str, port: int, count: int, request: Callable[[], T]) -> tuple[int, T]:
    """Open `count` idle connections, then make `request`: (threads started meanwhile, its result)."""
    before = threading.active_count()
    with idle_connections(host, port, count):
        time.sleep(0.5)  # a thread-per-connection server has started its threads by now
        grown = threading.active_count() - before
        result = request()
    return (grown, *result) if isinstance(result, tuple) else (grown, result)  # type: ignore[return-value]


def slowloris_lasts(
    host: str, port: int, *, every_s: float, give_up_s: float, context: ssl.SSLContext | None = None
) -> float:
    """Seconds a client sending one header line every `every_s` keeps its connection (at most
    `give_up_s`); over TLS when `context` is given (the trickle starts after the handshake)."""
    start = time.monotonic()
    plain = socket.create_connection((host, port), timeout=give_up_s)
    with context.wrap_socket(plain, server_hostname=host) if context else plain as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        s.settimeout(every_s)
        while time.monotonic() - start < give_up_s:
            try:
                if s.recv(1024) == b"":
                    break  # closed by the server
            except TimeoutError:
                pass
            except OSError:
                break
            try:
                s.sendall(b"X-Trickle: 1\r\n")
            except OSError:
                break
    return time.monotonic() - start


def raw_exchange(host: str, port: int, sent: bytes, *, timeout_s: float = 5) -> bytes:
    """Send bytes, return what comes back before the server closes or goes quiet."""
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        with contextlib.suppress(OSError):
            s.sendall(sent)
        out = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                out += chunk
                if b"\r\n\r\n" in out:
                    break
        return out
