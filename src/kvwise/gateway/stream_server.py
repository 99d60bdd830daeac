"""An asyncio stream server that, when closed, also closes every connection it has accepted.

`asyncio.start_server` leaves accepted connections open when the server closes (Python 3.13
added `Server.abort_clients()` for that). A connection accepted in the last moment before its
event loop stops is worse off: asyncio sets it up one loop step after the accept, so a close()
in between cannot see it, and its handler task is cancelled before it ever runs, so the
handler's own `finally: writer.close()` never happens and the socket stays open until the
garbage collector finds it. Here such a connection is reset as soon as it is set up. The fake
upstream and the tests' scripted servers use this server so that stopping them is like a process
exiting: the port and every connection close at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class _Connections:
    """The connections a server has accepted and not yet seen close."""

    def __init__(self) -> None:
        self.open: set[asyncio.BaseTransport] = set()
        self.is_closed = False

    def close_all(self) -> None:
        self.is_closed = True
        for transport in list(self.open):
            transport.abort()  # type: ignore[attr-defined]  # every stream transport has it
        self.open.clear()


class _TrackedProtocol(asyncio.StreamReaderProtocol):
    def __init__(self, handler: Handler, connections: _Connections) -> None:
        super().__init__(asyncio.StreamReader(), handler)
        self._connections = connections
        self._tracked: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._connections.is_closed:
            # accepted just before the server closed, set up just after: the loop creates the
            # transport a step after the accept, so close() could not see it
            transport.abort()  # type: ignore[attr-defined]
            return
        self._tracked = transport
        self._connections.open.add(transport)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._tracked is None:
            return  # refused in connection_made: the handler never saw it
        self._connections.open.discard(self._tracked)
        super().connection_lost(exc)


class StreamServer:
    def __init__(self, server: asyncio.Server, connections: _Connections) -> None:
        self.server = server
        self.connections = connections

    @property
    def transports(self) -> set[asyncio.BaseTransport]:
        """The accepted connections not yet closed."""
        return self.connections.open

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    def close(self) -> None:
        """Stop listening and reset every accepted connection, served or not, including one
        the loop finishes setting up after this call."""
        self.server.close()
        self.connections.close_all()

    async def wait_closed(self) -> None:
        await self.server.wait_closed()
        await asyncio.sleep(0)  # the aborted transports' connection_lost callbacks


async def start_stream_server(
    handler: Handler, host: str = "127.0.0.1", port: int = 0
) -> StreamServer:
    connections = _Connections()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _TrackedProtocol(handler, connections), host, port)
    return StreamServer(server, connections)
