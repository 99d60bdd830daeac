"""Small raw-ASGI helpers: JSON/error responses, a capped body read, disconnect detection.

The completion endpoints are plain ASGI callables rather than Starlette request/response
functions: they stream, they must notice a client that goes away while its request waits or
runs, and they sit on the hot path whose overhead the gateway benchmark measures.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

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


def body_writer(send: Send) -> Callable[[bytes], bool] | None:
    """Under uvicorn's httptools server, once a chunked response has started: a plain function
    that writes one body chunk straight to the connection, framed as uvicorn's `send` frames
    it, without the ASGI `send` coroutine and its message dict (the streaming relay's cost per
    SSE event). It returns False, writing nothing, while uvicorn's flow control holds writes
    back or the client is gone: `send` then does what it does. None for any other server
    (h11, a test transport) or response."""
    cycle: Any = getattr(send, "__self__", None)
    if (
        type(cycle).__module__ != "uvicorn.protocols.http.httptools_impl"
        or getattr(cycle, "chunked_encoding", None) is not True
        or not getattr(cycle, "response_started", False)
        or getattr(cycle, "response_complete", True)
    ):
        return None
    transport, flow = cycle.transport, cycle.flow

    def write(body: bytes) -> bool:
        if flow.write_paused or cycle.disconnected:
            return False
        transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        return True

    return write
