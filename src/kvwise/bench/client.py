"""One streamed chat request against an OpenAI-compatible server, timed as vLLM's bench does.

Timing follows `vllm bench serve` (`benchmarks/lib/endpoint_request_func.py`): TTFT is from
sending to the first chunk that carries content; every later content chunk adds one
inter-token latency (ITL, the gap since the previous chunk); E2E is from sending to the end of
the stream. Output tokens come from the server's usage chunk (`stream_options.include_usage`)
when it sends one. Anything that goes wrong (an HTTP error status, an error event in the
stream, a dropped connection, a timeout) ends the request as failed with a one-line reason;
it never raises.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Outcome:
    """What one request measured; times in seconds on the run's clock."""

    sent_s: float
    first_token_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)  # every content chunk, in order
    finish_s: float = 0.0
    text: str = ""
    prompt_tokens: int | None = None  # usage, when the server reports it
    output_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    finish_reason: str | None = None
    error: str | None = None


def chat_body(
    model: str, messages: list[dict[str, str]], max_tokens: int, *, ignore_eos: bool
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if ignore_eos:  # vLLM/SGLang/llama.cpp extension: generate exactly max_tokens
        body["ignore_eos"] = True
    return body


async def stream_chat(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    clock_start: float,
    headers: dict[str, str] | None = None,
) -> Outcome:
    outcome = Outcome(sent_s=time.perf_counter() - clock_start)
    try:
        async with client.stream("POST", url, json=body, headers=headers) as response:
            if response.status_code != 200:
                await response.aread()
                outcome.error = f"HTTP {response.status_code}: {_error_message(response.text)}"
            else:
                await _read_events(response, outcome, clock_start)
    except httpx.TimeoutException as exc:
        outcome.error = f"timeout ({type(exc).__name__})"
    except httpx.HTTPError as exc:  # refused, reset, dropped mid-stream, protocol errors
        outcome.error = f"connection: {type(exc).__name__}: {exc}".rstrip(": ")
    outcome.finish_s = time.perf_counter() - clock_start
    if outcome.error is None and outcome.first_token_s is None:
        outcome.error = "no token received"
    return outcome


async def _read_events(response: httpx.Response, outcome: Outcome, clock_start: float) -> None:
    done = False
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue  # blank separators, comments, "event:" lines
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            outcome.error = "malformed stream event"
            return
        if _apply_chunk(chunk, outcome, time.perf_counter() - clock_start):
            return
    if not done and outcome.finish_reason is None and outcome.error is None:
        outcome.error = "stream ended before the answer did"


def _apply_chunk(chunk: dict[str, Any], outcome: Outcome, now_s: float) -> bool:
    """Fold one event into the outcome; True when the event is an error (stop reading)."""
    if "error" in chunk:
        outcome.error = f"server error: {_error_message(json.dumps(chunk))}"
        return True
    usage = chunk.get("usage")
    if usage:
        outcome.prompt_tokens = usage.get("prompt_tokens")
        outcome.output_tokens = usage.get("completion_tokens")
        details = usage.get("prompt_tokens_details") or {}
        outcome.cached_tokens = details.get("cached_tokens")
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        content = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
        if content:
            if outcome.first_token_s is None:
                outcome.first_token_s = now_s
            outcome.chunk_times_s.append(now_s)
            outcome.text += delta.get("content") or ""
        if choice.get("finish_reason"):
            outcome.finish_reason = choice["finish_reason"]
    return False


def _error_message(text: str) -> str:
    """The server's own message from an OpenAI-style error body, on one line."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return " ".join(text.split())[:200] or "(empty body)"
    error = body.get("error", body) if isinstance(body, dict) else body
    message = error.get("message", error) if isinstance(error, dict) else error
    return " ".join(str(message).split())[:200]
