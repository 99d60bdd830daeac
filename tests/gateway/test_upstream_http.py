"""The gateway's upstream HTTP client: read timeouts on a stalled stream, none on a slow one;
back-pressure on a large body read slowly.

The upstream here is a raw asyncio server scripted byte by byte: the test is about how the
client times its reads, which needs exact control of when each byte arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import pytest

from kvwise.gateway.upstream_http import UpstreamClient, UpstreamConnectionError
from tests.stream_server import StreamServer, start_stream_server

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


Script = Callable[[asyncio.StreamWriter], Awaitable[None]]


async def serve_once(script: Script) -> tuple[StreamServer, str]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        try:
            await script(writer)
        finally:
            writer.close()

    server = await start_stream_server(handle)
    return server, f"http://127.0.0.1:{server.port}/v1/completions"


async def read_stream(script: Script, read_timeout_s: float) -> tuple[list[bytes], float]:
    server, url = await serve_once(script)
    client = UpstreamClient(connect_timeout_s=5.0, read_timeout_s=read_timeout_s)
    started_s = time.perf_counter()
    try:
        response = await client.post(url, b"{}", {})
        pieces = [piece async for piece in response.iter_raw()]
        response.close()
        return pieces, time.perf_counter() - started_s
    finally:
        await client.aclose()
        server.close()


def test_a_stream_that_stalls_fails_after_the_read_timeout() -> None:
    async def stall_after_one_event(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + chunk(b"data: 1\n\n"))
        await asyncio.sleep(5)

    started_s = time.perf_counter()
    with pytest.raises(UpstreamConnectionError, match="timed out"):
        asyncio.run(read_stream(stall_after_one_event, read_timeout_s=0.3))
    assert time.perf_counter() - started_s < 2.0  # not the upstream's 5 s


def test_a_slow_stream_longer_than_the_read_timeout_is_not_cut() -> None:
    """The timeout bounds each wait for bytes, not the whole stream."""

    async def one_event_every_100ms(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        for i in range(8):
            await asyncio.sleep(0.1)
            writer.write(chunk(b"data: %d\n\n" % i))
        writer.write(b"0\r\n\r\n")

    pieces, elapsed_s = asyncio.run(read_stream(one_event_every_100ms, read_timeout_s=0.3))
    assert b"".join(pieces) == b"".join(b"data: %d\n\n" % i for i in range(8))
    assert elapsed_s > 0.6  # longer than two read timeouts, and not cut


def test_a_response_head_that_never_comes_times_out() -> None:
    async def say_nothing(writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    with pytest.raises(UpstreamConnectionError, match="timed out waiting for the response"):
        asyncio.run(read_stream(say_nothing, read_timeout_s=0.3))


def test_a_body_bigger_than_the_buffer_arrives_whole_to_a_slow_reader() -> None:
    """Past its buffer the client stops reading the socket, and resumes as the relay catches
    up: a large body must arrive whole and in order, with no stall."""
    pieces_sent = [bytes([65 + i % 26]) * 60_000 for i in range(40)]  # 2.4 MB

    async def burst(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        for piece in pieces_sent:
            writer.write(chunk(piece))
            await writer.drain()  # blocks while the client has paused reading
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def read_slowly() -> bytes:
        server, url = await serve_once(burst)
        client = UpstreamClient(connect_timeout_s=5.0, read_timeout_s=2.0)
        try:
            response = await client.post(url, b"{}", {})
            received = []
            async for piece in response.iter_raw():
                received.append(piece)
                await asyncio.sleep(0.002)  # a relay slower than the upstream
            response.close()
            return b"".join(received)
        finally:
            await client.aclose()
            server.close()

    assert asyncio.run(read_slowly()) == b"".join(pieces_sent)


def test_a_response_that_ends_after_the_client_closed_gives_its_connection_up() -> None:
    """A relay finishing while the gateway shuts down: its kept-alive connection must close, not
    wait in the closed client's pool for the garbage collector."""

    async def scenario() -> None:
        closed_by_client = asyncio.Event()

        async def answer_and_keep_alive(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HEAD + chunk(b"data: 1\n\n") + b"0\r\n\r\n")
            await reader.read()  # the request's body, then the end: the client closed
            closed_by_client.set()

        server = await start_stream_server(answer_and_keep_alive)
        client = UpstreamClient(connect_timeout_s=5.0, read_timeout_s=5.0)
        try:
            response = await client.post(f"http://127.0.0.1:{server.port}/v1/x", b"{}", {})
            await client.aclose()
            with contextlib.suppress(UpstreamConnectionError):  # what was buffered, or none
                await response.read()
            response.close()
            await asyncio.wait_for(closed_by_client.wait(), timeout=5)
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
