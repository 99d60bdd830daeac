"""An asyncio stream server that, when closed, also closes every connection it has accepted.

`asyncio.start_server` leaves accepted connections open when the server closes (Python 3.13
added `Server.abort_clients()` for that). A connection accepted in the last moment before its
event loop stops is worse off: its handler task is cancelled before it ever runs, so the
handler's own `finally: writer.close()` never happens and the socket stays open until the
garbage collector finds it. The fake upstream and the tests' scripted servers use this server so
that stopping them is like a process exiting: the port and every connection close at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class _TrackedProtocol(asyncio.StreamReaderProtocol):
    def __init__(self, handler: Handler, transports: set[asyncio.BaseTransport]) -> None:
        super().__init__(asyncio.StreamReader(), handler)
        self._transports = transports
        self._tracked: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._tracked = transport
        self._transports.add(transport)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._tracked is not None:
            self._transports.discard(self._tracked)
        super().connection_lost(exc)


class StreamServer:
    def __init__(self, server: asyncio.Server, transports: set[asyncio.BaseTransport]) -> None:
        self.server = server
        self.transports = transports  # the accepted connections not yet closed

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    def close(self) -> None:
        """Stop listening and reset every accepted connection, served or not."""
        self.server.close()
        for transport in list(self.transports):
            transport.abort()  # type: ignore[attr-defined]  # every stream transport has it
        self.transports.clear()

    async def wait_closed(self) -> None:
        await self.server.wait_closed()
        await asyncio.sleep(0)  # the aborted transports' connection_lost callbacks


async def start_stream_server(
    handler: Handler, host: str = "127.0.0.1", port: int = 0
) -> StreamServer:
    transports: set[asyncio.BaseTransport] = set()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _TrackedProtocol(handler, transports), host, port)
    return StreamServer(server, transports)
