"""Server-sent events as the OpenAI API streams them: splitting, reading, and the assistant reply.

The gateway relays each upstream event as soon as it is complete (never the whole stream), and
looks inside only as far as it must: whether an event carries a token (the point after which a
failed replica can no longer be replaced), and, for session history, the reply's text and tool
calls.
"""

from __future__ import annotations

import json
from typing import Any

DONE = b"data: [DONE]"
_DECODER = json.JSONDecoder()  # json.loads(bytes) first guesses the encoding, in Python


class EventSplitter:
    """Bytes in, complete events (`data: ...\\n\\n`, separator kept) out."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self._pending + chunk if self._pending else chunk
        if data.find(b"\r") >= 0:  # `b"\r" in data` first tries b"\r" as an int, and raises
            data = data.replace(b"\r\n", b"\n")
        events = data.split(b"\n\n")
        self._pending = events.pop()
        return [event + b"\n\n" for event in events if event]

    def feed_joined(self, chunk: bytes) -> bytes:
        """As `feed`, the complete events joined (b"" when none): one bytes object to relay,
        without a list or a copy per event. Blank lines between events are kept (an SSE client
        ignores them); what `feed` returns joined otherwise."""
        data = self._pending + chunk if self._pending else chunk
        if data.find(b"\r") >= 0:
            data = data.replace(b"\r\n", b"\n")
        end = data.rfind(b"\n\n")
        if end < 0:
            self._pending = data
            return b""
        end += 2
        if end == len(data):
            self._pending = b""
            return data
        self._pending = data[end:]
        return data[:end]

    def has_pending(self) -> bool:
        return bool(self._pending)

    def rest(self) -> bytes:
        """Whatever arrived without a closing blank line (a truncated stream)."""
        rest, self._pending = self._pending, b""
        return rest


def event_json(event: bytes) -> dict[str, Any] | None:
    """The JSON payload of a `data:` event, or None ([DONE], comments, malformed)."""
    for line in event.split(b"\n"):
        if line.startswith(b"data:") and not line.startswith(DONE):
            try:
                payload = _DECODER.decode(line[5:].decode())
            except ValueError:  # UnicodeDecodeError included
                return None
            return payload if isinstance(payload, dict) else None
    return None


def is_done(event: bytes) -> bool:
    return event.startswith(DONE)


def carries_token(payload: dict[str, Any]) -> bool:
    """A chunk with generated output (text, reasoning, tool call) or a finish reason."""
    for choice in payload.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        if choice.get("finish_reason") or choice.get("text"):
            return True
        delta = choice.get("delta") or {}
        if isinstance(delta, dict) and (
            delta.get("content")
            or delta.get("reasoning_content")
            or delta.get("reasoning")
            or delta.get("tool_calls")
        ):
            return True
    return False


def count_token_events(events: bytes) -> int:
    """JSON `data:` events in a run of complete events, the usage-only closing chunk not
    counted, without splitting or parsing them. A newline inside JSON is escaped, so a
    blank line then `data: {` only ever starts an event, and a quote inside a JSON string is escaped, so the
    usage-only marker cannot appear in generated text."""
    count = events.count(b"\n\ndata: {") + events.startswith(b"data: {")
    return count - events.count(b'"choices":[]') - events.count(b'"choices": []')


def is_usage_only(event: bytes) -> bool:
    """vLLM's closing chunk under `stream_options.include_usage`: no choice, so no token.
    (vLLM writes compact JSON; the spaced form is what json.dumps writes by default.)"""
    return b'"choices":[]' in event or b'"choices": []' in event


def error_event(message: str, error_type: str = "upstream_error", code: int = 502) -> bytes:
    """What a stream that cannot go on ends with (the openai client raises it as APIError)."""
    body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class ReplyCollector:
    """The assistant message of choice 0, from stream deltas or from a whole response."""

    def __init__(self) -> None:
        self._content: list[str] = []
        self._tool_calls: dict[int, dict[str, Any]] = {}

    def add_chunk(self, payload: dict[str, Any]) -> None:
        for choice in payload.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self._content.append(delta["content"])
            for call in delta.get("tool_calls") or ():
                self._merge_tool_call(call)

    def _merge_tool_call(self, call: dict[str, Any]) -> None:
        # Deltas of one call share an index: id, type and name come once, arguments in pieces.
        merged = self._tool_calls.setdefault(
            call.get("index", 0),
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        merged["id"] = call.get("id") or merged["id"]
        merged["type"] = call.get("type") or merged["type"]
        function = call.get("function") or {}
        merged["function"]["name"] += function.get("name") or ""
        merged["function"]["arguments"] += function.get("arguments") or ""

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._content)}
        if self._tool_calls:
            message["tool_calls"] = [self._tool_calls[i] for i in sorted(self._tool_calls)]
        return message


def reply_of_response(response: dict[str, Any]) -> dict[str, Any] | None:
    """The assistant message of a non-streamed chat completion (choice 0), None fields dropped."""
    choices = response.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message") or {}
    kept = {k: message[k] for k in ("role", "content", "tool_calls") if message.get(k) is not None}
    kept.setdefault("role", "assistant")
    kept.setdefault("content", "")
    return kept
