"""One engine's `/metrics` over the last minute: the figures `top` and the page show per replica.

Gauges (KV use, running, waiting) are the latest scrape's; rates (preemptions per minute,
tokens/s) and TTFT/TPOT percentiles come from the difference between the latest scrape and the
oldest one still inside the window. Metric names are vLLM's (vllm/v1/metrics/loggers.py at
v0.32.0; `time_per_output_token_seconds` is the older releases' TPOT), newest first where a
release renamed them; counters and gauges are parsed by `live.metrics`.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Any

from kvwise.live import histograms
from kvwise.live.histograms import Buckets
from kvwise.live.metrics import GAUGES, Snapshot, parse_prometheus

WINDOW_S = 60.0
TTFT = ("vllm:time_to_first_token_seconds",)
TPOT = (
    "vllm:request_time_per_output_token_seconds",
    "vllm:time_per_output_token_seconds",
    "vllm:inter_token_latency_seconds",
)
PREEMPTIONS = ("vllm:num_preemptions_total",)
TOKENS = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total")


@dataclass(frozen=True)
class EngineSample:
    at_s: float  # time.monotonic() of the scrape
    snapshot: Snapshot
    buckets: dict[str, Buckets]


def parse_sample(text: str, at_s: float | None = None) -> EngineSample:
    names = TTFT + TPOT
    at = time.monotonic() if at_s is None else at_s
    return EngineSample(at, parse_prometheus(text), histograms.parse_buckets(text, names))


def pool_tokens(snapshot: Snapshot) -> int | None:
    """num_gpu_blocks x block_size from vllm:cache_config_info; None when not exported."""
    blocks, size = (snapshot.cache_config.get(k, "") for k in ("num_gpu_blocks", "block_size"))
    return int(blocks) * int(size) if blocks.isdigit() and size.isdigit() else None


class EngineWindow:
    """The scrapes of one engine over the last `window_s` seconds (plus the one just before)."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self.samples: collections.deque[EngineSample] = collections.deque()

    def add(self, sample: EngineSample) -> None:
        self.samples.append(sample)
        while len(self.samples) > 2 and sample.at_s - self.samples[1].at_s >= self.window_s:
            self.samples.popleft()

    def figures(self, planned_pool_tokens: int | None) -> dict[str, Any]:
        """What the engine reports now, and over the window; {} before the first scrape."""
        if not self.samples:
            return {}
        latest = self.samples[-1].snapshot
        usage = latest.figure(GAUGES["kv_cache_usage"])
        pool = pool_tokens(latest)
        figures: dict[str, Any] = {
            "kv_pool_tokens": pool,
            "planned_pool_tokens": planned_pool_tokens,
            "kv_usage_pct": None if usage is None else round(usage * 100, 1),
            "kv_used_tokens": None if usage is None or pool is None else round(usage * pool),
            "num_requests_running": _int(latest.figure(GAUGES["num_requests_running"])),
            "num_requests_waiting": _int(latest.figure(GAUGES["num_requests_waiting"])),
        }
        figures.update(self._rates())
        return figures

    def _rates(self) -> dict[str, Any]:
        first, last = self.samples[0], self.samples[-1]
        span_s = last.at_s - first.at_s
        rates: dict[str, Any] = {"window_s": round(span_s, 1)}
        preempted = _counter_delta(first.snapshot, last.snapshot, PREEMPTIONS)
        counted = [_counter_delta(first.snapshot, last.snapshot, (n,)) for n in TOKENS]
        tokens = (
            sum(c for c in counted if c is not None)
            if any(c is not None for c in counted)
            else None
        )
        rates["num_preemptions_total"] = _int(last.snapshot.figure(PREEMPTIONS))
        rates["preemptions_per_min"] = _per(preempted, span_s, 60.0)
        rates["tokens_per_s"] = _per(tokens, span_s, 1.0)
        for key, names in (("ttft", TTFT), ("tpot", TPOT)):
            window = _window_buckets(first, last, names)
            for label, q in (("p50", 0.5), ("p99", 0.99)):
                value = histograms.quantile(window, q) if window else None
                rates[f"{key}_{label}_ms"] = None if value is None else round(value * 1000, 1)
        return rates


def _window_buckets(
    first: EngineSample, last: EngineSample, names: tuple[str, ...]
) -> Buckets | None:
    name = next((n for n in names if n in last.buckets), None)
    if name is None:
        return None
    before = first.buckets.get(name) if first is not last else None
    return histograms.delta(last.buckets[name], before)


def _counter_delta(before: Snapshot, after: Snapshot, names: tuple[str, ...]) -> float | None:
    start, end = before.figure(names), after.figure(names)
    if end is None:
        return None
    return end - start if start is not None and end >= start else end


def _per(amount: float | None, span_s: float, unit_s: float) -> float | None:
    if amount is None or span_s <= 0:
        return None
    return round(amount / span_s * unit_s, 2)


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)
