"""One engine's `/metrics` over the last minute: the figures `top` and the page show per replica.

Gauges (KV use, running, waiting) are the latest scrape's; rates (preemptions per minute,
tokens/s) and TTFT/TPOT percentiles come from the difference between the latest scrape and the
oldest one still inside the window. Metric names are vLLM's (vllm/v1/metrics/loggers.py at
v0.32.0; `time_per_output_token_seconds` is the older releases' TPOT), newest first where a
release renamed them; counters and gauges are parsed by `live.metrics`.

SGLang's come after them (sglang 0.5.23, python/sglang/srt/observability/metrics_collector.py;
exported only with `--enable-metrics`): the pool is `sglang:max_total_num_tokens` and the KV in
use `sglang:num_used_tokens` (exact: SGLang allocates per token), retractions stand for
preemptions (`sglang:num_retracted_requests_total`), TPOT is the per-request
`request_time_per_output_token_seconds`. Its scheduler gauges carry tp/pp/dp rank labels: a
figure is read per DP rank (the largest over that rank's label sets, since TP ranks report the
same figure when every scheduler exports) and summed over DP ranks, as the gateway reads them.
"""

from __future__ import annotations

import collections
import re
import time
from dataclasses import dataclass, field
from typing import Any

from kvwise.live import histograms
from kvwise.live.histograms import Buckets
from kvwise.live.metrics import GAUGES, Snapshot, parse_prometheus

WINDOW_S = 60.0
TTFT = ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds")
TPOT = (
    "vllm:request_time_per_output_token_seconds",
    "vllm:time_per_output_token_seconds",
    "vllm:inter_token_latency_seconds",
    "sglang:request_time_per_output_token_seconds",
    "sglang:inter_token_latency_seconds",
)
PREEMPTIONS = ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total")
TOKENS = (
    ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
)
# SGLang's scheduler gauges read per DP rank (see the module's docstring)
SGLANG_POOL = "sglang:max_total_num_tokens"
SGLANG_USED = "sglang:num_used_tokens"
SGLANG_USAGE = "sglang:token_usage"
SGLANG_RUNNING = "sglang:num_running_reqs"
SGLANG_QUEUED = "sglang:num_queue_reqs"
_SGLANG_RANKED = (SGLANG_POOL, SGLANG_USED, SGLANG_USAGE, SGLANG_RUNNING, SGLANG_QUEUED)
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_DP_RANK = re.compile(r'dp_rank="([^"]*)"')


@dataclass(frozen=True)
class EngineSample:
    at_s: float  # time.monotonic() of the scrape
    snapshot: Snapshot
    buckets: dict[str, Buckets]
    sglang: dict[str, float] = field(default_factory=dict)  # SGLang's gauges, over DP ranks

    @property
    def engine(self) -> str | None:
        """Whose metric names the scrape carries: "vllm", "sglang" or None."""
        names = self.snapshot.values
        if any(n.startswith("vllm:") for n in names):
            return "vllm"
        return "sglang" if any(n.startswith("sglang:") for n in names) else None


def parse_sample(text: str, at_s: float | None = None) -> EngineSample:
    names = TTFT + TPOT
    at = time.monotonic() if at_s is None else at_s
    return EngineSample(
        at, parse_prometheus(text), histograms.parse_buckets(text, names), sglang_gauges(text)
    )


def sglang_gauges(text: str) -> dict[str, float]:
    """SGLang's scheduler gauges: per DP rank the largest over its label sets, summed over the
    DP ranks (`token_usage`, a ratio: their mean). {} when the text has none."""
    per_rank: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if not line.startswith(_SGLANG_RANKED):
            continue
        match = _SAMPLE.match(line)
        if match is None or match.group(1) not in _SGLANG_RANKED:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        rank = _DP_RANK.search(match.group(2) or "")
        key = (match.group(1), rank.group(1) if rank else "0")
        per_rank[key] = max(per_rank.get(key, value), value)
    figures: dict[str, float] = {}
    for (name, _), value in per_rank.items():
        figures[name] = figures.get(name, 0.0) + value
    ranks = sum(1 for name, _ in per_rank if name == SGLANG_USAGE)
    if ranks:
        figures[SGLANG_USAGE] /= ranks
    return figures


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
        sample = self.samples[-1]
        figures: dict[str, Any]
        if sample.engine == "sglang":
            figures = _sglang_figures(sample.sglang)
        else:
            latest = sample.snapshot
            usage = latest.figure(GAUGES["kv_cache_usage"])
            pool = pool_tokens(latest)
            figures = {
                "kv_pool_tokens": pool,
                "kv_usage_pct": None if usage is None else round(usage * 100, 1),
                "kv_used_tokens": None if usage is None or pool is None else round(usage * pool),
                "num_requests_running": _int(latest.figure(GAUGES["num_requests_running"])),
                "num_requests_waiting": _int(latest.figure(GAUGES["num_requests_waiting"])),
            }
        figures["engine"] = sample.engine
        figures["planned_pool_tokens"] = planned_pool_tokens
        figures.update(self._rates())
        return figures

    def _rates(self) -> dict[str, Any]:
        first, last = self.samples[0], self.samples[-1]
        span_s = last.at_s - first.at_s
        rates: dict[str, Any] = {"window_s": round(span_s, 1)}
        preempted = _counter_delta(first.snapshot, last.snapshot, PREEMPTIONS)
        counted = [_counter_delta(first.snapshot, last.snapshot, names) for names in TOKENS]
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


def _sglang_figures(gauges: dict[str, float]) -> dict[str, Any]:
    """SGLang's KV figures: exact used tokens over the pool (`max_total_num_tokens`, exported
    from 0.5.x); an older release without the pool gauge gives its rounded `token_usage` only."""
    pool, used = gauges.get(SGLANG_POOL), gauges.get(SGLANG_USED)
    usage = used / pool if pool and used is not None else gauges.get(SGLANG_USAGE)
    return {
        "kv_pool_tokens": _int(pool) if pool else None,
        "kv_usage_pct": None if usage is None else round(usage * 100, 1),
        "kv_used_tokens": _int(used),
        "num_requests_running": _int(gauges.get(SGLANG_RUNNING)),
        "num_requests_waiting": _int(gauges.get(SGLANG_QUEUED)),
    }


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
