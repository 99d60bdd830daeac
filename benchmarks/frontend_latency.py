"""vLLM's API server: the time a lone request spends outside the engine, per endpoint, measured.

    .venv/bin/python benchmarks/frontend_latency.py [--requests 64] [--prompt-words 200] [--json]

Starts the real vLLM engine on CPU with the tiny model (tests/engine_fixture.py) and sends
requests one at a time (nothing queues), streamed, max_tokens 1, first to /v1/completions then
to /v1/chat/completions with the same text. For each request the client's TTFT is the time from
sending to the first SSE data line, as vLLM's benchmark_serving takes it. The engine's share is
read from vLLM's own histograms on /metrics over the same requests:

    vllm:request_queue_time_seconds     waiting in the engine core's queue
    vllm:request_prefill_time_seconds   scheduled -> first token (the engine step)

so that what is left, client TTFT - (queue + prefill), is the API server and the two process
hops: HTTP and JSON parsing, the chat template (chat only), tokenization, the request's trip
to the engine core and the first token's trip back (detokenization, one SSE chunk). The
difference between the two endpoints is the chat endpoint's own cost: parsing the messages and
rendering the chat template (`entrypoints/openai/serving_chat.py: _preprocess_chat`).

The CPU is this machine's, not a GPU server's host; the figures measure vLLM's code path at the
installed release (--json gives the version) on a slow, shared CPU, so they are upper bounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.engine_fixture import SERVED_MODEL_NAME, EngineProcess, engine_vllm_version

ENGINE_METRICS = ("vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds")


def text(i: int, words: int) -> str:
    return f"request {i}: " + " ".join(f"word{(i * 7 + k) % 97}" for k in range(words))


def body(path: str, i: int, words: int) -> dict[str, object]:
    common: dict[str, object] = {
        "model": SERVED_MODEL_NAME,
        "max_tokens": 1,
        "ignore_eos": True,
        "stream": True,
        "temperature": 0.0,
    }
    if path.endswith("chat/completions"):
        return common | {"messages": [{"role": "user", "content": text(i, words)}]}
    return common | {"prompt": text(i, words)}


def histogram_sums(url: str) -> dict[str, float]:
    """`<name>_sum` of each engine histogram, summed over its label sets."""
    sums = dict.fromkeys(ENGINE_METRICS, 0.0)
    for line in httpx.get(f"{url}/metrics", timeout=10.0).text.splitlines():
        for name in ENGINE_METRICS:
            if line.startswith(f"{name}_sum"):
                sums[name] += float(line.rsplit(" ", 1)[1])
    return sums


def ttft_s(client: httpx.Client, path: str, payload: dict[str, object]) -> float:
    start = time.perf_counter()
    first = None
    with client.stream("POST", path, json=payload) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is None and line.startswith("data: ") and line != "data: [DONE]":
                first = time.perf_counter() - start
    assert first is not None, "no data line in the stream"
    return first


def phase(url: str, path: str, requests: int, words: int, offset: int) -> dict[str, float]:
    with httpx.Client(base_url=url, timeout=120.0) as client:
        for i in range(4):  # warm-up: first-call costs are not a request's
            ttft_s(client, path, body(path, offset + 10_000 + i, words))
        before = histogram_sums(url)
        ttfts = [ttft_s(client, path, body(path, offset + i, words)) for i in range(requests)]
        after = histogram_sums(url)
    engine = sum(after[name] - before[name] for name in ENGINE_METRICS) / requests
    return {
        "client_ttft_median_s": statistics.median(ttfts),
        "client_ttft_mean_s": statistics.fmean(ttfts),
        "engine_mean_s": engine,
        "outside_engine_mean_s": statistics.fmean(ttfts) - engine,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--prompt-words", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        engine = EngineProcess(Path(tmp) / "engine.log").start()
        try:
            url = engine.url
            completions = phase(url, "/v1/completions", args.requests, args.prompt_words, 0)
            chat = phase(url, "/v1/chat/completions", args.requests, args.prompt_words, 100_000)
            # the same again, the other way round: a drift of the shared machine's load over
            # the run would otherwise read as a difference between the endpoints
            chat2 = phase(url, "/v1/chat/completions", args.requests, args.prompt_words, 200_000)
            completions2 = phase(url, "/v1/completions", args.requests, args.prompt_words, 300_000)
        finally:
            engine.stop()
    version = engine_vllm_version()

    def mean(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
        return {k: (a[k] + b[k]) / 2 for k in a}

    both_completions, both_chat = mean(completions, completions2), mean(chat, chat2)
    result = {
        "vllm": version,
        "requests_per_phase": args.requests,
        "prompt_words": args.prompt_words,
        "completions": both_completions,
        "chat": both_chat,
        "phases": {"completions": [completions, completions2], "chat": [chat, chat2]},
        "chat_extra_s": both_chat["outside_engine_mean_s"]
        - both_completions["outside_engine_mean_s"],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"vLLM {version}, {args.requests} requests a phase, one at a time, max_tokens 1")
    for name in ("completions", "chat"):
        row = result[name]
        print(
            f"  {name:<12} client TTFT median {row['client_ttft_median_s'] * 1e3:6.2f} ms, "
            f"engine (queue + prefill) {row['engine_mean_s'] * 1e3:6.2f} ms, "
            f"outside the engine {row['outside_engine_mean_s'] * 1e3:6.2f} ms"
        )
    print(f"  chat endpoint's own cost: {result['chat_extra_s'] * 1e3:+.2f} ms a request")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
