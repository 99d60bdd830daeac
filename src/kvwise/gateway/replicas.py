"""The replicas behind the gateway: KV budget, reservations, health and live engine metrics.

A replica's room for one more request, in KV tokens (what `admission` checks):

    effective budget = min(planned budget, engine pool) - tokens used by others
    tokens used by others = max(0, engine's used KV tokens - our reservations on it
                                   - (block_size - 1) per request of ours in flight)

Our reservations (prompt + max_tokens per request) are upper bounds of what our requests hold,
except that vLLM allocates whole blocks (a request's last block is partly empty; 128-token
blocks on CPU), hence the per-request slack. So "used by others" never over-tightens: it only
counts KV that someone else (a client talking to the engine directly, another gateway) holds.
A replica whose engine reports waiting requests is full, whatever the arithmetic says: the engine
itself is queueing. SGLang's figures (`sglang:num_used_tokens`, `num_queue_reqs`,
`max_total_num_tokens`) are read into the same fields; it allocates per token, so no slack.
A replica with nothing of ours in flight always takes one request, so a request larger than the
budget runs alone, not never.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvwise.live.window import (
    SGLANG_POOL,
    SGLANG_QUEUED,
    SGLANG_USAGE,
    SGLANG_USED,
    sglang_gauges,
)

# Prometheus text lines: name{labels} value   (vLLM's names, see vllm/v1/metrics/loggers.py)
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_VLLM_SERIES = (
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:num_requests_waiting",
    "vllm:cache_config_info",
)
# SGLang's scheduler gauges (python/sglang/srt/metrics/collector.py; observability/
# metrics_collector.py from 0.5.2x): queued requests, KV tokens in use (exact;
# `token_usage` is rounded to two decimals), and the pool (`max_total_num_tokens`, newer
# releases only). Every TP rank may export the same figures: they are read per DP rank (max over
# its label sets) and summed over DP ranks.
# (the names and the per-rank reading are kvwise.live.window's, which `top` uses too)
_SGLANG_SERIES = (SGLANG_QUEUED, SGLANG_USED, SGLANG_USAGE, SGLANG_POOL)
_SGLANG_NAMES = frozenset(_SGLANG_SERIES)
_USED_SERIES = _VLLM_SERIES + _SGLANG_SERIES


@dataclass(frozen=True)
class EngineLoad:
    """What the engine's /metrics says, summed over its engines (data-parallel ranks)."""

    kv_cache_usage_perc: float  # 0..1, fraction of KV blocks in use
    num_requests_waiting: int
    pool_tokens: int | None  # num_gpu_blocks x block_size, from vllm:cache_config_info
    block_size: int = 16  # vLLM's GPU default; the CPU backend uses 128
    engine: str | None = "vllm"  # whose metric names were found (None: neither's)
    used_tokens: int | None = None  # exact, where the engine reports it (SGLang)


def _parse_sglang(text: str) -> EngineLoad | None:
    """SGLang's gauges, or None when the text has none. SGLang allocates KV per token
    (page_size 1 by default, server_args.py), so a request holds no partly empty block."""
    gauges = sglang_gauges(text)
    if not _SGLANG_NAMES.intersection(gauges):
        return None
    pool = gauges.get(SGLANG_POOL)
    used = gauges.get(SGLANG_USED)
    usage = used / pool if pool and used is not None else gauges.get(SGLANG_USAGE, 0.0)
    return EngineLoad(
        usage,
        int(gauges.get(SGLANG_QUEUED, 0)),
        int(pool) if pool else None,
        block_size=1,
        engine="sglang",
        used_tokens=int(used) if used is not None else None,
    )


def parse_engine_metrics(text: str) -> EngineLoad:
    """vLLM's or SGLang's load, by the metric names the text carries."""
    if "vllm:" not in text:
        sglang = _parse_sglang(text)
        if sglang is not None:
            return sglang
    usage: list[float] = []
    waiting = 0
    pool_tokens: int | None = None
    block_size = 16
    for line in text.splitlines():
        # a real engine exports ~450 series (histogram buckets included) and this runs on the
        # event loop every health tick: only the four used here reach the regex
        if not line.startswith(_USED_SERIES):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.group(1), match.group(2) or "", match.group(3)
        if name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
            usage.append(float(value))
        elif name == "vllm:num_requests_waiting":
            waiting += int(float(value))
        elif name == "vllm:cache_config_info":
            info = dict(_LABEL.findall(labels))
            if info.get("block_size", "").isdigit():
                block_size = int(info["block_size"])
            if info.get("num_gpu_blocks", "None").isdigit():
                pool_tokens = int(info["num_gpu_blocks"]) * block_size
    mean_usage = sum(usage) / len(usage) if usage else 0.0
    engine = "vllm" if "vllm:" in text else None
    return EngineLoad(mean_usage, waiting, pool_tokens, block_size, engine)


class Replica:
    """One upstream server and what the gateway holds on it (mutated only on the event loop)."""

    def __init__(
        self, name: str, url: str, budget_tokens: int, max_num_seqs: int | None = None
    ) -> None:
        self.name = name
        self.url = url.rstrip("/")
        self.budget_tokens = budget_tokens
        self.max_num_seqs = max_num_seqs  # the engine's running cap; None: not known
        self.reserved_tokens = 0
        self.num_in_flight = 0
        self.num_seqs = 0  # sequences of ours in flight (a request with n choices runs n)
        self.peak_reserved_tokens = 0
        self.peak_in_flight = 0
        self.is_healthy = True
        self.is_draining = False  # going away: no new requests, those in flight finish
        self.num_failed_probes = 0  # health probes unanswered in a row
        self.load: EngineLoad | None = None

    @property
    def is_in_service(self) -> bool:
        """Takes new requests: answering its health checks and not being drained."""
        return self.is_healthy and not self.is_draining

    def effective_budget_tokens(self) -> int:
        budget = self.budget_tokens
        if self.load is None:
            return budget
        if self.load.pool_tokens is not None:
            budget = min(budget, self.load.pool_tokens)
            used_tokens = self.load.used_tokens
            if used_tokens is None:
                used_tokens = int(self.load.kv_cache_usage_perc * self.load.pool_tokens)
            ours_at_most = self.reserved_tokens + self.num_in_flight * (self.load.block_size - 1)
            budget -= max(0, used_tokens - ours_at_most)
        return budget

    def has_room(self, cost_tokens: int, num_seqs: int = 1) -> bool:
        if not self.is_in_service:
            return False
        if self.num_in_flight == 0:
            return True
        if self.max_num_seqs is not None and self.num_seqs + num_seqs > self.max_num_seqs:
            return False  # vLLM would queue it: it runs at most max_num_seqs sequences
        if self.load is not None and self.load.num_requests_waiting > 0:
            return False
        return self.reserved_tokens + cost_tokens <= self.effective_budget_tokens()

    def reserve(self, cost_tokens: int, num_seqs: int = 1) -> None:
        self.reserved_tokens += cost_tokens
        self.num_in_flight += 1
        self.num_seqs += num_seqs
        self.peak_reserved_tokens = max(self.peak_reserved_tokens, self.reserved_tokens)
        self.peak_in_flight = max(self.peak_in_flight, self.num_in_flight)

    def release(self, cost_tokens: int, num_seqs: int = 1) -> None:
        self.reserved_tokens -= cost_tokens
        self.num_in_flight -= 1
        self.num_seqs -= num_seqs
        assert self.reserved_tokens >= 0 and self.num_in_flight >= 0
