"""An asyncio stream server that, when closed, also closes every connection it has accepted.

`asyncio.start_server` leaves accepted connections open when the server closes (Python 3.13
added `Server.abort_clients()` for that), and it has a worse gap in the last moment before a
close: it accepts a connection in one loop step and creates its transport in a later one. If the
server closes in between, Python 3.11's transport constructor fails an assertion (the server it
attaches to has no sockets left), the failure is swallowed, and the half-built transport keeps
the socket open until the garbage collector finds it and warns, in whichever test is running
then. So this server does its own accepting: it knows every connection from the moment of the
accept, through the set-up, to the close, and `close()` resets all of them. A connection set up
after the close is reset as soon as its transport exists.

The fake upstream and the tests' scripted servers use it, so that stopping one is like a process
exiting: the port and every connection close at once.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

_BACKLOG = 128


class _Connections:
    """The connections a server has set up and not yet seen close."""

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
            # accepted before the server closed, set up after: reset it, never serve it
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
    def __init__(self, listener: socket.socket, handler: Handler) -> None:
        self._listener = listener
        self._handler = handler
        self._loop = asyncio.get_running_loop()
        self.connections = _Connections()
        # accepted sockets whose transport is being set up, by the task setting it up
        self._setting_up: dict[asyncio.Task[object], socket.socket] = {}
        self.port = int(listener.getsockname()[1])
        self._loop.add_reader(listener.fileno(), self._accept)

    @property
    def transports(self) -> set[asyncio.BaseTransport]:
        """The accepted connections not yet closed."""
        return self.connections.open

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            conn.setblocking(False)
            set_up = self._loop.connect_accepted_socket(
                lambda: _TrackedProtocol(self._handler, self.connections), conn
            )
            task: asyncio.Task[object] = self._loop.create_task(set_up)
            self._setting_up[task] = conn
            task.add_done_callback(self._set_up_done)

    def _set_up_done(self, task: asyncio.Task[object]) -> None:
        conn = self._setting_up.pop(task)
        if task.cancelled() or task.exception() is not None:
            # cancelled before it ran (no transport owns the socket) or while its transport
            # was being set up (the transport closes it too; closing twice is harmless)
            conn.close()

    def close(self) -> None:
        """Stop listening and reset every accepted connection: served, being set up, or set up
        after this call."""
        if self.connections.is_closed:
            return
        self._loop.remove_reader(self._listener.fileno())
        self._listener.close()
        for task in self._setting_up:
            task.cancel()
        self.connections.close_all()

    async def wait_closed(self) -> None:
        """Until the sockets of everything `close()` reset are closed."""
        await asyncio.gather(*self._setting_up, return_exceptions=True)
        await asyncio.sleep(0)  # the aborted transports' connection_lost callbacks


async def start_stream_server(
    handler: Handler, host: str = "127.0.0.1", port: int = 0
) -> StreamServer:
    """Listen on host:port (port 0: any free one, see `.port`) and serve each connection with
    `handler(reader, writer)` in its own task."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    listener = socket.create_server((host, port), family=family, backlog=_BACKLOG)
    listener.setblocking(False)
    return StreamServer(listener, handler)
