"""vLLM's API server: CPU time per request and per streamed output token, measured.

    .venv/bin/python benchmarks/frontend_cost.py [--streams 32] [--requests 256] [--tokens 128]

Starts the real vLLM engine on CPU with the tiny model (tests/engine_fixture.py), then reads the
API-server process's own CPU time (utime + stime of the `api_server` process, all its threads;
the engine core is a separate child process and is not counted) around three phases:

    one-token   streamed /v1/completions with max_tokens 1: HTTP, tokenization, one chunk
    many-token  the same prompts with max_tokens N (ignore_eos): each extra token is one pass
                through the output processor (detokenization) and one SSE chunk written
    chat        /v1/chat/completions with max_tokens 1: the chat template on top
    chat-many   /v1/chat/completions with max_tokens N: the chat stream's cost per token

    frontend_token_s    = (CPU(many) - CPU(one)) / (requests x (N - 1))
    frontend_request_s  = CPU(one) / requests
    chat extra per request = (CPU(chat) - CPU(one)) / requests
    chat_token_s        = (CPU(chat-many) - CPU(chat)) / (requests x (N - 1))

These are the API server's CPU costs that kvwise's simulator puts on its front end
(src/kvwise/sim/frontend.py). The CPU is this machine's, not a GPU server's host; the figure is
a measurement of vLLM's code path at the installed release (see --json for the version).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.engine_fixture import SERVED_MODEL_NAME, EngineProcess, engine_vllm_version

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """utime + stime of one process, all its threads, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


async def _one(client: httpx.AsyncClient, path: str, body: dict[str, object]) -> int:
    chunks = 0
    async with client.stream("POST", path, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks += 1
    return chunks


async def phase(url: str, path: str, bodies: list[dict[str, object]], streams: int) -> int:
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(base_url=url, timeout=600.0, limits=limits) as client:
        gate = asyncio.Semaphore(streams)

        async def run(body: dict[str, object]) -> int:
            async with gate:
                return await _one(client, path, body)

        return sum(await asyncio.gather(*(run(b) for b in bodies)))


def prompt(i: int) -> str:
    return f"request {i}: " + " ".join(f"word{(i * 7 + k) % 97}" for k in range(24))


def completion(i: int, max_tokens: int) -> dict[str, object]:
    return {
        "model": SERVED_MODEL_NAME,
        "prompt": prompt(i),
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "temperature": 0.0,
    }


def chat(i: int, max_tokens: int = 1) -> dict[str, object]:
    return {
        "model": SERVED_MODEL_NAME,
        "messages": [{"role": "user", "content": prompt(i)}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "temperature": 0.0,
    }


def metrics_cpu_s(url: str) -> float | None:
    """The API server's own `process_cpu_seconds_total` on /metrics (what `kvwise bench` reads)."""
    for line in httpx.get(f"{url}/metrics", timeout=10.0).text.splitlines():
        if line.startswith("process_cpu_seconds_total "):
            return float(line.split()[1])
    return None


def measure(
    url: str, pid: int, path: str, bodies: list[dict[str, object]], streams: int
) -> tuple[float, float, int, float | None]:
    before, wall, scraped = cpu_s(pid), time.monotonic(), metrics_cpu_s(url)
    chunks = asyncio.run(phase(url, path, bodies, streams))
    after = metrics_cpu_s(url)
    delta = after - scraped if after is not None and scraped is not None else None
    return cpu_s(pid) - before, time.monotonic() - wall, chunks, delta


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    n, m = args.requests, args.tokens
    with tempfile.TemporaryDirectory() as tmp:
        engine = EngineProcess(Path(tmp) / "engine.log").start()
        try:
            assert engine.proc is not None
            pid, url = engine.proc.pid, engine.url
            measure(url, pid, "/v1/completions", [completion(i, 4) for i in range(16)], 16)
            one = measure(
                url, pid, "/v1/completions", [completion(i, 1) for i in range(n)], args.streams
            )
            many = measure(
                url, pid, "/v1/completions", [completion(i, m) for i in range(n)], args.streams
            )
            try:
                chat_phase = measure(
                    url, pid, "/v1/chat/completions", [chat(i) for i in range(n)], args.streams
                )
                chat_many = measure(
                    url, pid, "/v1/chat/completions", [chat(i, m) for i in range(n)], args.streams
                )
            except httpx.HTTPStatusError as exc:
                chat_phase = chat_many = None
                print(f"chat endpoint not measured: {exc}", file=sys.stderr)
        finally:
            engine.stop()
    version = engine_vllm_version()
    token_s = (many[0] - one[0]) / (n * (m - 1))
    result = {
        "vllm": version,
        "streams": args.streams,
        "requests": n,
        "tokens": m,
        "one_token": {"cpu_s": one[0], "wall_s": one[1], "chunks": one[2], "metrics_cpu_s": one[3]},
        "many_token": {
            "cpu_s": many[0],
            "wall_s": many[1],
            "chunks": many[2],
            "metrics_cpu_s": many[3],
        },
        "chat": None if chat_phase is None else {"cpu_s": chat_phase[0], "wall_s": chat_phase[1]},
        "frontend_request_s": one[0] / n,
        "frontend_token_s": token_s,
        "chat_extra_request_s": None if chat_phase is None else (chat_phase[0] - one[0]) / n,
        "chat_many_token": None
        if chat_many is None
        else {"cpu_s": chat_many[0], "wall_s": chat_many[1], "chunks": chat_many[2]},
        "chat_token_s": None
        if chat_phase is None or chat_many is None
        else (chat_many[0] - chat_phase[0]) / (n * (m - 1)),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"vLLM {version}, {args.streams} streams, {n} requests, max_tokens {m}")
    print(f"  per request (max_tokens 1):   {one[0] / n * 1e6:8.0f} us CPU")
    print(
        f"  per extra output token:       {token_s * 1e6:8.1f} us CPU  (ceiling {1 / token_s:,.0f} tokens/s)"
    )
    if result["chat_extra_request_s"] is not None:
        print(f"  chat template, per request:   {result['chat_extra_request_s'] * 1e6:8.0f} us CPU")
    if result["chat_token_s"] is not None:
        print(f"  chat, per extra output token: {result['chat_token_s'] * 1e6:8.1f} us CPU")
    print(f"  wall: {one[1]:.1f} s / {many[1]:.1f} s; chunks {one[2]} / {many[2]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
