"""Small raw-ASGI helpers: JSON/error responses, a capped body read, disconnect detection.

The completion endpoints are plain ASGI callables rather than Starlette request/response
functions: they stream, they must notice a client that goes away while its request waits or
runs, and they sit on the hot path whose overhead the gateway benchmark measures.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE, STATUS_LINE

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class HttpError(Exception):
    """An OpenAI-style error response: {"error": {"message", "type", "param", "code"}}."""

    def __init__(
        self,
        status: int,
        message: str,
        error_type: str = "invalid_request_error",
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.status,
            }
        }


class ClientGone(Exception):
    """The client disconnected."""


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


async def send_response(
    send: Send, status: int, body: bytes, content_type: bytes, headers: dict[str, str] | None = None
) -> None:
    raw_headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})


async def send_json(
    send: Send, status: int, payload: Any, headers: dict[str, str] | None = None
) -> None:
    await send_response(send, status, json.dumps(payload).encode(), b"application/json", headers)


async def send_error(send: Send, error: HttpError) -> None:
    await send_json(send, error.status, error.body(), error.headers)


async def read_body(scope: Scope, receive: Receive, max_bytes: int) -> bytes:
    """The request body, refused with 413 past `max_bytes` (checked before and while reading)."""
    declared = header(scope, b"content-length")
    too_large = HttpError(413, f"request body larger than {max_bytes} bytes", "request_too_large")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise too_large
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def wait_for_disconnect(receive: Receive) -> None:
    """Returns when the client goes away (call only after the body has been read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


_UVICORN_HTTPTOOLS = "uvicorn.protocols.http.httptools_impl"
# headers that would make uvicorn frame the body otherwise, or close the connection after it
_FRAMING_HEADERS = frozenset((b"content-length", b"transfer-encoding", b"connection"))


# header lines as BodyWriter.start writes them, per (name, value) seen: a response's headers
# are mostly the same few (content type, the replica's name), checked once each
_HEADER_LINES: dict[tuple[bytes, bytes], bytes] = {}
_MAX_HEADER_LINES = 1024


def _header_line(name: bytes, value: bytes) -> bytes | None:
    """`name: value` and its line end, checked as uvicorn's `send` checks them; None for a
    header that changes the framing (uvicorn's `send` must write that response)."""
    lowered = name.lower()
    if lowered in _FRAMING_HEADERS:
        return None
    if HEADER_RE.search(lowered) or HEADER_VALUE_RE.search(value):
        raise RuntimeError("Invalid HTTP header name or value.")  # as uvicorn's `send`
    if len(_HEADER_LINES) >= _MAX_HEADER_LINES:
        _HEADER_LINES.clear()
    line = _HEADER_LINES[(name, value)] = b"%b: %b\r\n" % (lowered, value)
    return line


class BodyWriter:
    """Under uvicorn's httptools server, once a chunked response has started: body chunks
    written straight to the connection, framed as uvicorn's `send` frames them, without the
    ASGI `send` coroutine and its message dict (the streaming relay's cost per SSE event).
    Only while `is_open()`: uvicorn's flow control holds writes back, or the client is gone,
    and `send` then does what it does. `of(send)` is None for any other server (h11, a test
    transport) or response."""

    def __init__(self, cycle: Any) -> None:
        self._cycle, self._transport, self._flow = cycle, cycle.transport, cycle.flow

    @classmethod
    def of(cls, send: Send) -> BodyWriter | None:
        cycle: Any = getattr(send, "__self__", None)
        if (
            type(cycle).__module__ != _UVICORN_HTTPTOOLS
            or getattr(cycle, "chunked_encoding", None) is not True
            or not getattr(cycle, "response_started", False)
            or getattr(cycle, "response_complete", True)
        ):
            return None
        return cls(cycle)

    @classmethod
    def start(
        cls,
        send: Send,
        status: int,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        is_last: bool = False,
    ) -> BodyWriter | None:
        """A chunked response's head and first body chunk in one write, where uvicorn's `send`
        makes two (two TCP segments, with TCP_NODELAY) for the same bytes: its head as it
        writes it (its default headers, then these, checked as it checks them). `is_last`:
        the body is all there is, and the response ends in the same write, as `send` ends
        one (its last chunk, then the connection kept alive or closed, the next pipelined
        request started). None, nothing written, where `send` must do it: another server,
        uvicorn's access log on, the client gone or not reading, a header that changes the
        framing."""
        cycle: Any = getattr(send, "__self__", None)
        if (
            type(cycle).__module__ != _UVICORN_HTTPTOOLS
            or cycle.response_started
            or cycle.disconnected
            or cycle.flow.write_paused
            or (cycle.access_log and cycle.access_logger.isEnabledFor(logging.INFO))
        ):
            return None
        content = [STATUS_LINE[status]]
        for name, value in cycle.default_headers:  # uvicorn's own (date, server)
            content += (name.lower(), b": ", value, b"\r\n")
        for header in headers:
            line = _HEADER_LINES.get(header)
            if line is None:
                line = _header_line(*header)
                if line is None:
                    return None
            content.append(line)
        if not cycle.keep_alive:
            content.append(b"connection: close\r\n")
        content.append(b"transfer-encoding: chunked\r\n\r\n")
        if body:
            content.append(b"%x\r\n%b\r\n" % (len(body), body))
        if is_last:
            content.append(b"0\r\n\r\n")
        cycle.response_started, cycle.waiting_for_100_continue = True, False
        cycle.chunked_encoding, cycle.expected_content_length = True, 0
        cycle.transport.write(b"".join(content))
        if is_last:  # what uvicorn's `send` does after a response's last body message
            cycle.response_complete = True
            cycle.message_event.set()
            if not cycle.keep_alive:
                cycle.transport.close()
            cycle.on_response()
        return cls(cycle)

    def is_open(self) -> bool:
        return not (self._flow.write_paused or self._cycle.disconnected)

    def write(self, body: bytes) -> bool:
        """One body chunk, framed here; False, nothing written, when not `is_open()`."""
        if self._flow.write_paused or self._cycle.disconnected:
            return False
        self._transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        return True

    def write_chunks(self, chunks: bytes) -> None:
        """Bytes framed as whole chunks already (none the last one), while `is_open()`."""
        self._transport.write(chunks)
