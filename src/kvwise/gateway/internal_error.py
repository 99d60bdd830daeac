"""The answer to the gateway's own failures: a 5xx in OpenAI's error shape, counted in
`kvwise_http_responses_total`, logged with a request id the client also gets.

The request id is the client's `x-request-id` when it sent one (so both sides' logs meet),
else a new one. A stream already under way cannot change its status: it ends with an SSE error
event carrying the same message.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import Protocol

from kvwise.gateway import sse
from kvwise.gateway.asgi import HttpError, Scope, Send, header, send_error

log = logging.getLogger("kvwise.gateway")

MAX_REQUEST_ID_CHARS = 128


class _Counts(Protocol):
    def count_response(self, status: int) -> None: ...


def request_id(scope: Scope) -> str:
    sent = header(scope, b"x-request-id")
    return sent[:MAX_REQUEST_ID_CHARS] if sent else uuid.uuid4().hex


def internal_error(counts: _Counts, scope: Scope, exc: BaseException) -> HttpError:
    rid = request_id(scope)
    log.error("request %s to %s failed inside the gateway", rid, scope.get("path"), exc_info=exc)
    counts.count_response(500)
    message = f"internal error in the gateway (request id {rid})"
    return HttpError(500, message, "internal_error", headers={"x-request-id": rid})


async def answer(send: Send, error: HttpError, has_started_response: bool) -> None:
    """Whatever the client can still be told; a client already gone is not an error more."""
    with contextlib.suppress(Exception):
        if not has_started_response:
            await send_error(send, error)
            return
        event = sse.error_event(error.message, error.error_type, error.status)
        await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
