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


async def pipe_then_read(
    script: Script, read_timeout_s: float, is_open: Callable[[], bool] = lambda: True
) -> tuple[list[tuple[bytes, bool]], list[bytes]]:
    """A body read as the streaming relay reads it: `pipe_body` until it stops, then
    `iter_raw` for the rest. What each path got: (piece, raw bytes given), and the rest."""
    server, url = await serve_once(script)
    client = UpstreamClient(connect_timeout_s=5.0, read_timeout_s=read_timeout_s)
    try:
        response = await client.post(url, b"{}", {})
        delivered: list[tuple[bytes, bool]] = []

        def deliver(piece: bytes, raw: bytes | None) -> None:
            if raw is not None:  # as the relay writes it: the chunk as read, framing and all
                assert raw == chunk(piece)
            delivered.append((piece, raw is not None))

        await response.pipe_body(is_open, deliver)
        rest = [piece async for piece in response.iter_raw()]
        response.close()
        return delivered, rest
    finally:
        await client.aclose()
        server.close()


EVENTS = [b'data: {"n": %d}\n\n' % i for i in range(6)]


def test_the_pipe_hands_on_whole_chunks_as_read_and_reassembles_split_ones() -> None:
    """One chunk per read goes on as it was read; chunks split across reads or several in a
    read are decoded first; the body is whole and in order either way."""

    async def odd_reads(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        await writer.drain()
        for event in EVENTS[:2]:  # one whole chunk per read
            await asyncio.sleep(0.02)
            writer.write(chunk(event))
        framed = b"".join(chunk(event) for event in EVENTS[2:])
        for start in range(0, len(framed), 7):  # then 7 bytes at a time
            await asyncio.sleep(0.005)
            writer.write(framed[start : start + 7])
        writer.write(b"0\r\n\r\n")

    delivered, rest = asyncio.run(pipe_then_read(odd_reads, read_timeout_s=2.0))
    assert b"".join(piece for piece, _ in delivered) + b"".join(rest) == b"".join(EVENTS)
    assert delivered[:2] == [(EVENTS[0], True), (EVENTS[1], True)]
    assert not any(raw for _, raw in delivered[2:])
    assert rest == []  # the last chunk came through the pipe too


def test_a_pipe_whose_reader_is_not_open_leaves_the_rest_to_iter_raw() -> None:
    """A client that stops reading: the pipe stops handing on, and the body's rest is read
    as before, nothing lost or repeated."""
    open_for = [2]

    def is_open() -> bool:
        open_for[0] -= 1
        return open_for[0] >= 0

    async def paced(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        for event in EVENTS:
            await asyncio.sleep(0.02)
            writer.write(chunk(event))
        writer.write(b"0\r\n\r\n")

    delivered, rest = asyncio.run(pipe_then_read(paced, read_timeout_s=2.0, is_open=is_open))
    assert [piece for piece, _ in delivered] == EVENTS[:2]
    assert b"".join(rest) == b"".join(EVENTS[2:])


def test_a_piped_stream_that_stalls_fails_after_the_read_timeout() -> None:
    async def stall_after_two_events(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        for event in EVENTS[:2]:
            await asyncio.sleep(0.02)
            writer.write(chunk(event))
        await asyncio.sleep(5)

    started_s = time.perf_counter()
    with pytest.raises(UpstreamConnectionError, match="timed out"):
        asyncio.run(pipe_then_read(stall_after_two_events, read_timeout_s=0.3))
    assert time.perf_counter() - started_s < 2.0  # not the upstream's 5 s


def test_a_piped_stream_cut_mid_body_fails_as_a_broken_one() -> None:
    async def crash_after_two_events(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        for event in EVENTS[:2]:
            await asyncio.sleep(0.02)
            writer.write(chunk(event))
        await asyncio.sleep(0.02)
        writer.transport.abort()

    with pytest.raises(UpstreamConnectionError, match="while reading the body"):
        asyncio.run(pipe_then_read(crash_after_two_events, read_timeout_s=2.0))
