"""What a client can make the gateway hold before authorization, attacked with raw sockets:
oversized heads, slowloris heads and bodies, idle keep-alive, too many connections."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from kvwise.gateway.config import SecurityConfig, ServerLimits
from tests.fake_upstream import Behaviour
from tests.gateway.servers import RunningGateway, fake_upstreams, make_config, running_gateway

LIMITS = ServerLimits(
    max_head_bytes=8192,
    max_headers=20,
    head_timeout_s=1.0,
    body_timeout_s=1.0,
    keep_alive_timeout_s=1,
    max_connections=8,
)
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"


@pytest.fixture(scope="module")
def gw() -> Iterator[RunningGateway]:
    with fake_upstreams(Behaviour()) as ups:
        security = SecurityConfig(api_keys=("sk-good",))
        with running_gateway(make_config([ups[0][0]], security=security, server=LIMITS)) as gw:
            yield gw


def connect(gw: RunningGateway) -> socket.socket:
    port = int(gw.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Until the server closes the connection (or 10 s pass: the test then fails on it)."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0


def test_an_oversized_head_gets_431_before_the_key_is_checked(gw: RunningGateway) -> None:
    for attack in (
        HEAD + b"x-junk: " + b"a" * 20_000 + b"\r\n\r\n",  # one huge header, sent at once
        HEAD + b"".join(b"x-h%d: v\r\n" % i for i in range(25)) + b"\r\n",  # too many headers
    ):
        with connect(gw) as sock:
            sock.sendall(attack)
            reply = read_all(sock)
        assert status_of(reply) == 431, reply[:200]
        assert b'"error"' in reply  # OpenAI's error shape
    with connect(gw) as sock:  # a head that never ends: cut off once past the cap
        sock.sendall(HEAD + b"x-junk: ")
        try:
            for _ in range(100):
                sock.sendall(b"a" * 1024)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert status_of(read_all(sock)) in (431, 0)
    assert httpx.get(f"{gw.url}/health").status_code == 200  # the server is still fine


def test_a_slowloris_head_or_body_is_cut_off_at_its_deadline(gw: RunningGateway) -> None:
    with connect(gw) as idle:  # connects and says nothing
        started_s = time.monotonic()
        assert status_of(read_all(idle)) == 408
        assert time.monotonic() - started_s < 3
    with connect(gw) as trickle:  # one header byte every 0.2 s, forever
        started_s = time.monotonic()
        trickle.sendall(HEAD)
        try:
            while time.monotonic() - started_s < 5:
                trickle.sendall(b"x")
                time.sleep(0.2)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert time.monotonic() - started_s < 3
    with connect(gw) as slow_body:  # a whole head, then a body that never completes
        started_s = time.monotonic()
        slow_body.sendall(HEAD + b"authorization: Bearer sk-good\r\ncontent-length: 100\r\n\r\n{")
        read_all(slow_body)
        assert time.monotonic() - started_s < 3


def test_each_request_on_a_kept_alive_connection_has_its_own_head_deadline(
    gw: RunningGateway,
) -> None:
    """The deadlines move with each request on a connection: a second head that trickles in
    is cut off a whole head deadline after its first byte, neither at a deadline left from the
    first request nor never."""
    with connect(gw) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: gw\r\n\r\n")
        assert status_of(sock.recv(65536)) == 200
        time.sleep(0.6)  # within the keep-alive timeout, past half the first head's deadline
        started_s = time.monotonic()
        sock.sendall(HEAD)
        try:
            while time.monotonic() - started_s < 5:
                sock.sendall(b"x")
                time.sleep(0.1)
                if time.monotonic() - started_s > 0.8:
                    break
            reply = read_all(sock)
        except (BrokenPipeError, ConnectionResetError):
            reply = b""
        elapsed_s = time.monotonic() - started_s
    assert status_of(reply) in (408, 0)
    assert LIMITS.head_timeout_s * 0.9 < elapsed_s < 3


def test_an_idle_kept_alive_connection_is_closed(gw: RunningGateway) -> None:
    with connect(gw) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: gw\r\n\r\n")
        started_s = time.monotonic()
        reply = read_all(sock)  # the answer, then nothing until the keep-alive timeout
        assert status_of(reply) == 200
        assert 0.8 < time.monotonic() - started_s < 3


def test_connections_past_the_cap_get_503(gw: RunningGateway) -> None:
    holders = [connect(gw) for _ in range(LIMITS.max_connections)]
    try:
        time.sleep(0.2)
        with connect(gw) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: gw\r\n\r\n")
            assert status_of(sock.recv(65536)) == 503
    finally:
        for sock in holders:
            sock.close()
    time.sleep(0.2)
    assert httpx.get(f"{gw.url}/health").status_code == 200
