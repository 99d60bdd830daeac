"""A failing server never stops a bench: each failure becomes one counted, explained request.

These use a raw loopback socket server that misbehaves on purpose (the end-to-end tests in
test_engine.py use the real vLLM engine): it drops the connection mid-stream, or answers an
OpenAI-style error.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import httpx

from kvwise.bench.client import Outcome, chat_body, stream_chat
from tests.stream_server import start_stream_server

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _chunk(content: str) -> bytes:
    event = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}
    return f"data: {json.dumps(event)}\n\n".encode()


async def _drop_after_two_chunks(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    for text in ("Hel", "lo"):
        body = _chunk(text)
        writer.write(f"{len(body):x}\r\n".encode() + body + b"\r\n")
        await writer.drain()
        await asyncio.sleep(0.01)
    writer.close()  # the engine died: no final chunk, no [DONE]


async def _reject(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    body = json.dumps({"error": {"message": "This model's maximum context length is 2048 tokens."}})
    writer.write(
        f"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n{body}".encode()
    )
    await writer.drain()
    writer.close()


async def _request_against(handler: Handler) -> Outcome:
    server = await start_stream_server(handler)
    url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
    body = chat_body("tiny", [{"role": "user", "content": "hi"}], 8, ignore_eos=True)
    try:
        async with httpx.AsyncClient() as client:
            return await stream_chat(client, url, body, 0.0)
    finally:
        server.close()
        await server.wait_closed()


def test_a_connection_dropped_mid_stream_is_a_failure_with_its_partial_timing() -> None:
    outcome = asyncio.run(_request_against(_drop_after_two_chunks))
    assert outcome.error is not None and outcome.error.startswith("connection")
    assert outcome.text == "Hello" and len(outcome.chunk_times_s) == 2


def test_an_http_error_keeps_the_servers_own_message() -> None:
    outcome = asyncio.run(_request_against(_reject))
    assert outcome.error == "HTTP 400: This model's maximum context length is 2048 tokens."


def test_nobody_listening_is_a_failure_not_a_crash() -> None:
    async def refused() -> Outcome:
        async with httpx.AsyncClient() as client:
            body = chat_body("tiny", [{"role": "user", "content": "hi"}], 8, ignore_eos=True)
            return await stream_chat(client, "http://127.0.0.1:9/v1/chat/completions", body, 0.0)

    outcome = asyncio.run(refused())
    assert outcome.error is not None and "ConnectError" in outcome.error
