"""The server's own view of a run, from vLLM's Prometheus `/metrics`, read before and after.

Counters are differenced (after - before): preemptions, prefix-cache queries and hits, prompt
and generated tokens, engine steps (the count of the `iteration_tokens_total` histogram: one
observation per step). Gauges (KV-cache usage, running and waiting requests) are sampled during
the run; their peaks and means are reported. Names changed across vLLM releases (`gpu_` prefix
before V1's renames); each figure lists the names it is read under, newest first. SGLang's
names (`sglang:`, python/sglang/srt/observability/metrics_collector.py at v0.5.23) come after
vLLM's for the figures it reports: retractions stand for preemptions. A server with neither
(llama.cpp, a gateway) gives `None`, never an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import dataclass, field
from typing import Any

import httpx

# figure -> metric names (summed over label sets), newest first
COUNTERS: dict[str, tuple[str, ...]] = {
    "num_preemptions": ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total"),
    "prefix_cache_queries": (
        "vllm:prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_queries_total",
    ),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    "num_steps": ("vllm:iteration_tokens_total_count",),
    "step_tokens": ("vllm:iteration_tokens_total_sum",),
    "num_requests_finished": ("vllm:request_success_total",),
    # CPU seconds of the process that serves /metrics: vLLM's API server (prometheus_client's
    # process collector; absent when the server runs several API processes). `kvwise
    # calibrate` divides it by the tokens streamed (kvwise.sim.frontend: frontend_token_s)
    "api_server_cpu_s": ("process_cpu_seconds_total",),
}
GAUGES: dict[str, tuple[str, ...]] = {
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
    ),
    "num_requests_running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "num_requests_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
}
# per-request phase times the engine itself measures: histogram sums and counts
PHASES = ("queue", "prefill", "decode")
CACHE_CONFIG_INFO = "vllm:cache_config_info"
SAMPLE_INTERVAL_S = 0.25  # a scrape costs the API server a few ms of CPU

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Snapshot:
    values: dict[str, float]  # metric name -> value summed over its label sets
    cache_config: dict[str, str]  # labels of vllm:cache_config_info (num_gpu_blocks, block_size...)

    def figure(self, names: tuple[str, ...]) -> float | None:
        return next((self.values[n] for n in names if n in self.values), None)


def parse_prometheus(text: str) -> Snapshot:
    values: dict[str, float] = {}
    cache_config: dict[str, str] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if not match:
            continue  # comments (# HELP, # TYPE) and blank lines
        name, labels, raw = match.groups()
        try:
            value = float(raw)
        except ValueError:
            continue
        values[name] = values.get(name, 0.0) + value
        if name == CACHE_CONFIG_INFO and labels:
            cache_config = dict(_LABEL.findall(labels))
    return Snapshot(values, cache_config)


async def scrape(client: httpx.AsyncClient, base_url: str) -> Snapshot | None:
    """The server's metrics, or None when it has no vLLM or SGLang metrics endpoint."""
    try:
        response = await client.get(f"{base_url}/metrics", timeout=5.0)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    snapshot = parse_prometheus(response.text)
    return snapshot if any(n.startswith(("vllm:", "sglang:")) for n in snapshot.values) else None


@dataclass
class GaugeSampler:
    """Samples the gauges every SAMPLE_INTERVAL_S while a run goes on."""

    client: httpx.AsyncClient
    base_url: str
    samples: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in GAUGES})

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            snapshot = await scrape(self.client, self.base_url)
            if snapshot is None:
                return
            for key, names in GAUGES.items():
                value = snapshot.figure(names)
                if value is not None:
                    self.samples[key].append(value)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), SAMPLE_INTERVAL_S)


def _delta(before: Snapshot, after: Snapshot, name: str) -> float | None:
    if name not in before.values or name not in after.values:
        return None
    return after.values[name] - before.values[name]


def server_report(
    before: Snapshot | None, after: Snapshot | None, sampler: GaugeSampler | None
) -> dict[str, Any] | None:
    """Deltas of the counters and peaks of the gauges; None when the server has no metrics."""
    if before is None or after is None:
        return None
    report: dict[str, Any] = {}
    for key, names in COUNTERS.items():
        start, end = before.figure(names), after.figure(names)
        if start is not None and end is not None:
            report[key] = end - start
    if "vllm:generation_tokens_total" not in after.values:
        # process_cpu_seconds_total is whichever process serves /metrics: vLLM's API server is
        # what kvwise.sim.frontend models; SGLang's (or a gateway's) process is not that cost
        report.pop("api_server_cpu_s", None)
    for phase in PHASES:
        name = f"vllm:request_{phase}_time_seconds"
        total_s = _delta(before, after, f"{name}_sum")
        count = _delta(before, after, f"{name}_count")
        if total_s is not None and count:
            report[f"mean_{phase}_time_ms"] = total_s / count * 1000
    queries = report.get("prefix_cache_queries")
    if queries:
        report["prefix_cache_hit_rate"] = report.get("prefix_cache_hits", 0.0) / queries
    for key, values in (sampler.samples if sampler else {}).items():
        if values:
            report[f"max_{key}"] = max(values)
            report[f"mean_{key}"] = sum(values) / len(values)
    return report
