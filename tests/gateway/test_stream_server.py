"""The loopback stream server behind the fake upstream and the tests' scripted servers: closing
it closes every connection it accepted, as a process that exits does, even one whose handler
never closes it (or never ran). Without that, a socket stays open until the garbage collector
finds it, and the warning lands in whichever later test happens to trigger a collection."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import warnings

from tests.stream_server import _Connections, _TrackedProtocol, start_stream_server


def test_closing_resets_a_connection_its_handler_never_closes() -> None:
    async def never_closes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async def scenario() -> bytes:
        server = await start_stream_server(never_closes)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        while not server.transports:
            await asyncio.sleep(0)
        server.close()
        await server.wait_closed()
        received = b"unread"
        with contextlib.suppress(ConnectionResetError):
            received = await asyncio.wait_for(reader.read(), timeout=5)
        writer.close()
        assert not server.transports
        return received

    assert asyncio.run(scenario()) in (
        b"",
        b"unread",
    )  # EOF, or reset: the client is not left hanging
    gc.collect()  # an unclosed socket would warn here, and warnings fail the tests


def test_a_connection_set_up_after_close_is_reset_and_never_served() -> None:
    """The loop creates an accepted connection's transport a step after the accept: a close()
    in between cannot see it, so the connection is refused as soon as it is set up."""
    served = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.append(writer)

    async def scenario() -> bytes:
        connections = _Connections()
        connections.close_all()  # the server closed between the accept and the set-up
        ours, theirs = socket.socketpair()
        with theirs:
            loop = asyncio.get_running_loop()
            transport, _ = await loop.connect_accepted_socket(
                lambda: _TrackedProtocol(handler, connections), ours
            )
            assert transport.is_closing()
            await asyncio.sleep(0)
            theirs.settimeout(5)
            try:
                return theirs.recv(1)
            except ConnectionResetError:
                return b""

    assert asyncio.run(scenario()) == b""
    assert not served
    gc.collect()


def test_closing_in_any_step_of_a_connection_set_up_leaves_no_socket_open() -> None:
    """A connection waits in the kernel's backlog, is accepted, gets its transport and then its
    handler, one loop step after another: the server closes after 0, 1, 2, ... steps, so in
    each of them. (With `asyncio.start_server` on Python 3.11, closing after 2 steps, between
    the accept and the transport, left the socket open.)"""

    async def idle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async def close_after(num_steps: int) -> None:
        server = await start_stream_server(idle)
        # a blocking connect: done in the kernel before the server's loop takes a step
        with socket.create_connection(("127.0.0.1", server.port)):
            for _ in range(num_steps):
                await asyncio.sleep(0)
            server.close()
            await server.wait_closed()
        assert not server.transports

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for num_steps in range(8):
            asyncio.run(close_after(num_steps))
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
