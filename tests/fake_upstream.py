"""A fake OpenAI-compatible upstream that streams canned tokens at a set pace. Not an engine.

It exists to measure the gateway alone (`benchmarks/gateway_overhead.py`: what the gateway adds
must not drown in an engine's own jitter) and to inject failures at exact points in tests (drop
the connection after k tokens, answer 500). Raw asyncio HTTP/1.1 with keep-alive, so that it
costs as little as possible on both sides of a comparison.

    python -m tests.fake_upstream --port 9000 --ttft-ms 20 --itl-ms 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass

from tests.stream_server import StreamServer, start_stream_server

_STATUS_TEXT = {200: "OK", 404: "Not Found", 500: "Internal Server Error"}


@dataclass
class Behaviour:
    """Mutable on purpose: tests change it between requests."""

    ttft_s: float = 0.0
    itl_s: float = 0.0
    drop_after_tokens: int | None = None  # close the connection abruptly after this many tokens
    stall_after_tokens: int | None = None  # go silent after this many tokens, connection open
    is_hung: bool = False  # read requests and answer nothing, /health included, until cleared
    status: int = 200
    max_model_len: int = 4096
    pool_tokens: int = 100_000
    # another engine's /metrics page, served verbatim instead of the vLLM figures above, and the
    # JSON of SGLang's /server_info (None: 404), for the gateway's reading of SGLang's figures
    metrics_text: str | None = None
    server_info: dict[str, object] | None = None


class FakeUpstream:
    def __init__(self, behaviour: Behaviour | None = None, name: str = "fake") -> None:
        self.behaviour = behaviour or Behaviour()
        self.name = name
        self.num_requests = 0
        self.num_running = 0
        self.peak_running = 0
        self.last_headers: dict[str, str] = {}  # of the last completion request, for tests
        self.last_request: dict[str, object] = {}
        self.server: StreamServer | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self.server = await start_stream_server(self._serve_connection, host, port)
        return self.server.port

    async def stop(self) -> None:
        """Like a process that exits: the port closes and so does every open connection."""
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while await self._serve_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _serve_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, path, _ = request_line.split(" ", 2)
        headers = {
            k.strip().lower(): v.strip()
            for k, _, v in (h.partition(":") for h in header_lines if h)
        }
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        while self.behaviour.is_hung:  # a hung process: the kernel accepts, nobody answers
            await asyncio.sleep(0.02)
        if method == "GET":
            self._write_plain(writer, *self._get(path))
        elif self.behaviour.status != 200:
            self._write_plain(
                writer, self.behaviour.status, b'{"error": "injected"}', "application/json"
            )
        else:
            self.num_requests += 1
            self.last_headers, self.last_request = headers, json.loads(body)
            return await self._complete(path, self.last_request, writer)
        await writer.drain()
        return True

    def _get(self, path: str) -> tuple[int, bytes, str]:
        if path == "/health":
            return 200, b"", "text/plain"
        if path == "/v1/models":
            card = {
                "id": self.name,
                "object": "model",
                "max_model_len": self.behaviour.max_model_len,
            }
            return 200, json.dumps({"object": "list", "data": [card]}).encode(), "application/json"
        if path == "/metrics" and self.behaviour.metrics_text is not None:
            return 200, self.behaviour.metrics_text.encode(), "text/plain"
        if path in ("/server_info", "/get_server_info") and self.behaviour.server_info:
            return 200, json.dumps(self.behaviour.server_info).encode(), "application/json"
        if path == "/metrics":
            num_blocks = self.behaviour.pool_tokens // 16
            text = (
                f'vllm:num_requests_running{{engine="0"}} {self.num_running}\n'
                'vllm:num_requests_waiting{engine="0"} 0\n'
                'vllm:kv_cache_usage_perc{engine="0"} 0\n'
                f'vllm:cache_config_info{{block_size="16",num_gpu_blocks="{num_blocks}"}} 1\n'
            )
            return 200, text.encode(), "text/plain"
        return 404, b"", "text/plain"

    def _write_plain(
        self, writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str
    ) -> None:
        head = (
            f"HTTP/1.1 {status} {_STATUS_TEXT.get(status, 'Status')}\r\n"
            f"content-type: {content_type}\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        )
        writer.write(head.encode() + body)

    async def _complete(
        self, path: str, request: dict[str, object], writer: asyncio.StreamWriter
    ) -> bool:
        self.num_running += 1
        self.peak_running = max(self.peak_running, self.num_running)
        try:
            # as vLLM and SGLang (ChatCompletionRequest.to_sampling_params): the newer one wins;
            # a completion request has no max_completion_tokens (vLLM ignores the field there)
            is_chat = path.endswith("chat/completions")
            newer = request.get("max_completion_tokens") if is_chat else None
            limit = newer or request.get("max_tokens") or 16
            if not isinstance(limit, int) or isinstance(limit, bool):
                # vLLM validates the body (pydantic) and answers 400, as the gateway relays
                error = b'{"error": {"message": "max_tokens: not an integer", "code": 400}}'
                self._write_plain(writer, 400, error, "application/json")
                return True
            num_tokens = limit
            if request.get("stream"):
                options = request.get("stream_options")
                include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
                return await self._stream(writer, num_tokens, is_chat, include_usage)
            if self.behaviour.drop_after_tokens is not None:
                writer.transport.abort()  # a crash before the response
                return False
            await asyncio.sleep(self.behaviour.ttft_s + self.behaviour.itl_s * (num_tokens - 1))
            self._write_plain(
                writer, 200, json.dumps(_whole(num_tokens, is_chat)).encode(), "application/json"
            )
            await writer.drain()
            return True
        finally:
            self.num_running -= 1

    async def _stream(
        self, writer: asyncio.StreamWriter, num_tokens: int, is_chat: bool, include_usage: bool
    ) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        if is_chat:
            _write_chunk(
                writer,
                _event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            )
        await writer.drain()
        await asyncio.sleep(self.behaviour.ttft_s)
        for i in range(num_tokens):
            if (
                self.behaviour.drop_after_tokens is not None
                and i >= self.behaviour.drop_after_tokens
            ):
                writer.transport.abort()  # a crash: no terminating chunk, connection reset
                return False
            stall_after = self.behaviour.stall_after_tokens
            if stall_after is not None and i >= stall_after:
                await asyncio.sleep(3600)  # a wedged engine: nothing more, nothing closed
            if i:
                await asyncio.sleep(self.behaviour.itl_s)
            finish = "length" if i == num_tokens - 1 else None
            _write_chunk(writer, _event(_token_chunk(i, is_chat, finish)))
            await writer.drain()
        if include_usage:  # as vLLM: a last chunk with no choice, only the usage
            _write_chunk(writer, _usage_event(num_tokens, is_chat))
        _write_chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


def _token_chunk(i: int, is_chat: bool, finish: str | None) -> dict[str, object]:
    text = f"t{i} "
    choice: dict[str, object] = {"index": 0, "finish_reason": finish}
    choice.update({"delta": {"content": text}} if is_chat else {"text": text})
    return {
        "id": "fake",
        "object": "chat.completion.chunk" if is_chat else "text_completion",
        "choices": [choice],
    }


def _usage(num_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": 1, "completion_tokens": num_tokens, "total_tokens": num_tokens + 1}


def _usage_event(num_tokens: int, is_chat: bool) -> bytes:
    kind = "chat.completion.chunk" if is_chat else "text_completion"
    payload = {"id": "fake", "object": kind, "choices": [], "usage": _usage(num_tokens)}
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _whole(num_tokens: int, is_chat: bool) -> dict[str, object]:
    text = "".join(f"t{i} " for i in range(num_tokens))
    choice: dict[str, object] = {"index": 0, "finish_reason": "length"}
    choice.update(
        {"message": {"role": "assistant", "content": text}} if is_chat else {"text": text}
    )
    return {
        "id": "fake",
        "object": "chat.completion",
        "choices": [choice],
        "usage": _usage(num_tokens),
    }


def _event(payload: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--model", default="fake", help="the name it answers to")
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--itl-ms", type=float, default=5.0)
    args, _ = parser.parse_known_args()  # vLLM's own flags, as a launcher passes them, are ignored

    async def serve() -> None:
        behaviour = Behaviour(ttft_s=args.ttft_ms / 1000, itl_s=args.itl_ms / 1000)
        upstream = FakeUpstream(behaviour, name=args.model)
        port = await upstream.start(args.host, args.port)
        print(f"fake upstream on http://{args.host}:{port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
