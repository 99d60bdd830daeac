"""The loopback stream server behind the fake upstream and the tests' scripted servers: closing
it closes every connection it accepted, as a process that exits does, even one whose handler
never closes it (or never ran). Without that, a socket stays open until the garbage collector
finds it, and the warning lands in whichever later test happens to trigger a collection."""

from __future__ import annotations

import asyncio
import contextlib
import gc

from kvwise.gateway.stream_server import start_stream_server


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
