"""From the engine's records to the numbers `vllm bench serve --save-result` reports.

Definitions follow vLLM's benchmark (`benchmarks/serve.py`): TTFT from sending to the first
token; TPOT = (E2E - TTFT) / (output tokens - 1) per request with more than one token; ITL =
every gap between consecutive tokens, pooled over requests; percentiles interpolate linearly
(numpy's default). Throughputs divide by the benchmark duration, from the first request sent to
the last answer. Median and p99 ITL come from a histogram with 0.1 % wide bins.
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import Any

from kvwise.sim.engine import Engine
from kvwise.sim.records import ITL_BINS_PER_E


def percentile(sorted_values: list[float], q: float) -> float:
    """numpy.percentile(values, q) with linear interpolation, for already sorted values."""
    if not sorted_values:
        return 0.0
    position = (len(sorted_values) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def stats_ms(
    values_s: list[float], name: str, percentiles: tuple[int, ...] = (99,)
) -> dict[str, float]:
    """vLLM benchmark_serving's mean, median and percentile keys for one latency, in ms."""
    ordered = sorted(values_s)
    mean = sum(ordered) / len(ordered) if ordered else 0.0
    stats = {f"mean_{name}_ms": mean * 1000, f"median_{name}_ms": percentile(ordered, 50) * 1000}
    return stats | {f"p{q}_{name}_ms": percentile(ordered, q) * 1000 for q in percentiles}


def totals(
    num_completed: int, duration_s: float, input_tokens: int, output_tokens: int
) -> dict[str, Any]:
    """vLLM benchmark_serving's counts and throughputs."""
    return {
        "completed": num_completed,
        "duration": duration_s,
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": num_completed / duration_s,
        "output_throughput": output_tokens / duration_s,
        "total_token_throughput": (input_tokens + output_tokens) / duration_s,
    }


def _hist_percentile_s(hist: dict[int, int], q: float) -> float:
    total = sum(hist.values())
    if not total:
        return 0.0
    rank = q / 100 * (total - 1)
    seen = 0
    for key in sorted(hist):
        seen += hist[key]
        if seen > rank:
            return math.exp((key + 0.5) / ITL_BINS_PER_E)
    return math.exp((max(hist) + 0.5) / ITL_BINS_PER_E)


def summarize(engine: Engine) -> dict[str, Any]:
    done = engine.finished
    everyone = done + engine.rejected
    start_s = min([r.sent_s for r in everyone], default=0.0)
    end_s = max([r.finish_s for r in everyone], default=0.0)
    duration = max(end_s - start_s, 1e-12)
    input_tokens = sum([r.num_prompt_tokens for r in done])
    output_tokens = sum([r.num_output_tokens for r in done])
    started = [(r, r.first_token_s) for r in done if r.first_token_s is not None]
    ttfts = [first_s - r.sent_s for r, first_s in started]
    tpots = [  # for requests with more than one token
        (r.finish_s - first_s) / (r.num_output_tokens - 1)
        for r, first_s in started
        if r.num_output_tokens >= 2
    ]
    decode_s = sum([r.finish_s - first_s for r, first_s in started])
    gaps = sum([r.num_output_tokens - 1 for r in done if r.num_output_tokens > 1])
    queue_s = [r.first_scheduled_s - r.arrival_s for r in done if r.first_scheduled_s is not None]
    scheduler, usable = engine.scheduler, engine.config.num_gpu_blocks - 1
    metrics: dict[str, Any] = totals(len(done), duration, input_tokens, output_tokens)
    metrics = {"completed": len(done), "rejected": len(engine.rejected)} | metrics
    metrics |= stats_ms(ttfts, "ttft")
    metrics |= stats_ms(tpots, "tpot")
    metrics |= {
        "mean_itl_ms": decode_s / gaps * 1000 if gaps else 0.0,
        "median_itl_ms": _hist_percentile_s(engine.itl_hist, 50) * 1000,
        "p99_itl_ms": _hist_percentile_s(engine.itl_hist, 99) * 1000,
    }
    metrics |= stats_ms([r.finish_s - r.sent_s for r in done], "e2el")
    metrics |= {
        "mean_queue_ms": sum(queue_s) / len(queue_s) * 1000 if queue_s else 0.0,
        "num_preemptions": scheduler.num_preemptions,
        "num_preempted_requests": len([r for r in done if r.num_preemptions]),
        "max_kv_usage": engine.max_used_blocks / usable,
        "mean_kv_usage": engine.kv_block_s / usable / duration,
        "prefix_cache_hit_rate": (
            scheduler.prefix_hit_tokens / scheduler.prefix_queried_tokens
            if scheduler.prefix_queried_tokens
            else 0.0
        ),
        "num_steps": engine.step_index,
        "busy_fraction": engine.busy_s / duration,
    }
    return metrics


def time_series(engine: Engine) -> dict[str, list[float]]:
    """KV use and queue lengths over time, and each request's latency at its completion."""
    done = sorted(engine.finished, key=attrgetter("finish_s", "request_id"))
    return {
        "time_s": [s[0] for s in engine.samples],
        "kv_usage": [s[1] for s in engine.samples],
        "num_running": [float(s[2]) for s in engine.samples],
        "num_waiting": [float(s[3]) for s in engine.samples],
        "finish_s": [r.finish_s for r in done],
        "ttft_ms": [((r.first_token_s or r.finish_s) - r.sent_s) * 1000 for r in done],
        "e2el_ms": [(r.finish_s - r.sent_s) * 1000 for r in done],
    }
