"""Limits on what a client may make the server hold before it has been authorized.

uvicorn has two of them and they are used as they are: `timeout_keep_alive` (an idle
kept-alive connection is closed) and `limit_concurrency` (past that many connections or
requests, a request gets 503). What its httptools protocol lacks is added here, in a subclass:

- the request head (request line and headers) is capped in bytes and in number of headers:
  past either, a 431 and the connection closes, before any route or API-key check runs (without
  the cap a client could stream MiB of headers into the parser's buffers);
- a connection must finish sending a request head within `head_timeout_s` of its first byte (or
  of connecting), and the body within `body_timeout_s` of the head: a client that trickles a
  byte at a time (slowloris) is cut off at the deadline (408 for a head; a body cut short reads
  as a disconnect, so the request is abandoned like any other whose client left).

Defaults (`kvwise.gateway.config.ServerLimits`): 32 KiB of head (nginx's default
`large_client_header_buffers 4 8k`), 100 headers (Apache httpd's `LimitRequestFields`), a 20 s
head deadline (the first value of Apache's `mod_reqtimeout` `header=20-40`), 60 s for the body
(nginx's `client_body_timeout`), 5 s idle keep-alive (uvicorn's default), connections up to
half the open-file limit.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from kvwise.gateway.asgi import HttpError
from kvwise.gateway.config import ServerLimits


def _error_response(status: int, reason: str, message: str) -> bytes:
    body = json.dumps(HttpError(status, message).body()).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class _HeadTooLarge(Exception):
    pass


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with head caps and receive deadlines (see module doc)."""

    limits = ServerLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the deadline in force (loop time) and what to call at it; one timer per connection,
        # moved lazily (as the upstream client's read timeout): arming and disarming a deadline
        # only sets these, twice per request, and the timer, when it fires, calls `_on_deadline`
        # if it is due, else sleeps until it
        self._deadline_s = 0.0
        self._on_deadline: Callable[[], None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_s = 0.0  # when the timer fires
        self._is_reading_head = True
        self._head_bytes = 0  # received since the head began
        self._num_headers = 0
        self._header_bytes = 0  # of the parsed headers (a whole head can come in one read)
        self._is_head_too_large = False
        # (the request's cycle, what to call if its client goes): see watch_disconnect()
        self._disconnect_watch: tuple[Any, Callable[[], None]] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.limits.head_timeout_s, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)
        watch, self._disconnect_watch = self._disconnect_watch, None
        if watch is not None and watch[0].disconnected:  # as uvicorn's `receive` would say
            watch[1]()

    def _arm(self, delay_s: float, callback: Callable[[], None]) -> None:
        """`callback()` in `delay_s`, unless disarmed or armed again before."""
        self._deadline_s = self.loop.time() + delay_s
        self._on_deadline = callback
        if self._timer is None or self._timer_s > self._deadline_s:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_s = self._deadline_s
            self._timer = self.loop.call_at(self._deadline_s, self._check_deadline)

    def _disarm(self) -> None:
        self._on_deadline = None

    def _check_deadline(self) -> None:
        self._timer = None
        if self._on_deadline is None:
            return  # disarmed: the next _arm() starts a timer again
        if self.loop.time() < self._deadline_s:  # armed again since: sleep until then
            self._timer_s = self._deadline_s
            self._timer = self.loop.call_at(self._deadline_s, self._check_deadline)
            return
        callback, self._on_deadline = self._on_deadline, None
        callback()

    def _reject(self, status: int, reason: str, message: str) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(_error_response(status, reason, message))
            self.transport.close()

    def _head_timed_out(self) -> None:
        self._reject(408, "Request Timeout", "request head not received in time")

    def _body_timed_out(self) -> None:
        self.transport.close()  # the app sees a disconnect: the request is abandoned

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        if self._is_reading_head:
            self._head_bytes += len(data)
        super().data_received(data)  # a callback's _HeadTooLarge comes back as a 400: see below
        if self._is_reading_head and self._head_bytes > self.limits.max_head_bytes:
            self._too_large()  # a head still unfinished after that many bytes

    def _too_large(self) -> None:
        message = (
            f"request head larger than {self.limits.max_head_bytes} bytes "
            f"or more than {self.limits.max_headers} headers"
        )
        self._reject(431, "Request Header Fields Too Large", message)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a parser error, which our callbacks' _HeadTooLarge also is."""
        if self._is_head_too_large:
            self._too_large()
            return
        self._disarm()
        super().send_400_response(msg)

    def _check_head(self) -> None:
        head_bytes = len(self.url) + self._header_bytes
        if self._num_headers > self.limits.max_headers or head_bytes > self.limits.max_head_bytes:
            self._is_head_too_large = True
            raise _HeadTooLarge

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._is_reading_head = True
        self._header_bytes = self._num_headers = 0
        if self._on_deadline is None:  # the next request on a kept-alive connection
            self._arm(self.limits.head_timeout_s, self._head_timed_out)

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._check_head()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._num_headers += 1
        self._header_bytes += len(name) + len(value) + 4  # ": " and CRLF
        self._check_head()
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._is_reading_head = False
        self._head_bytes = 0
        self._arm(self.limits.body_timeout_s, self._body_timed_out)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()


def watch_disconnect(send: Any, on_disconnect: Callable[[], None]) -> Callable[[], None] | None:
    """Under this module's protocol, once the request body has been read: `on_disconnect()`
    called from the connection's `connection_lost` when the client goes before the response
    is complete, exactly when uvicorn's `receive()` would answer `http.disconnect` to a task
    waiting on it, without that task (one task, one future and a cancellation less per
    request). Returns the function that stops the watch; None for any other server, a
    client already gone, or a connection whose current request is another one (pipelined):
    then wait on `receive()`."""
    cycle: Any = getattr(send, "__self__", None)
    protocol = getattr(getattr(cycle, "on_response", None), "__self__", None)
    if (
        not isinstance(protocol, LimitedHttpToolsProtocol)
        or protocol.cycle is not cycle
        or cycle.disconnected
        or cycle.response_complete
    ):
        return None
    cycle.flow.resume_reading()  # as `receive()` does: an EOF or reset is read, and seen
    watch = (cycle, on_disconnect)
    protocol._disconnect_watch = watch

    def unwatch() -> None:
        if protocol._disconnect_watch is watch:
            protocol._disconnect_watch = None

    return unwatch


def protocol_class(limits: ServerLimits) -> type[LimitedHttpToolsProtocol]:
    return type("GatewayHttpProtocol", (LimitedHttpToolsProtocol,), {"limits": limits})


def uvicorn_config(app: Any, host: str, port: int, limits: ServerLimits, **extra: Any) -> Any:
    """The uvicorn.Config the gateway serves with: its limits, uvicorn's where it has them."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol_class(limits),
        timeout_keep_alive=limits.keep_alive_timeout_s,
        limit_concurrency=limits.max_connections,
        **extra,
    )
