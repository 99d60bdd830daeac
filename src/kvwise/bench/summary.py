"""From request records to the numbers `vllm bench serve --save-result` reports.

Same definitions as vLLM's bench (`benchmarks/serve.py: calculate_metrics`) and as the
simulator's `kvwise.sim.metrics`, so measured and predicted figures compare key by key:
duration from the first request sent to the last answer; TTFT, TPOT and E2E per successful
request; ITL pooled over every gap of every request; percentiles with linear interpolation.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kvwise.bench.measured import timed, typical_gap
from kvwise.bench.records import RequestRecord
from kvwise.sim.metrics import stats_ms, totals

# the figures shown side by side with the simulator's, in this order
COMPARED_KEYS = (
    "request_throughput",
    "output_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "mean_itl_ms",
    "mean_e2el_ms",
)


def _latency(values_s: list[float], name: str) -> dict[str, float | None]:
    """vLLM bench's keys for one latency; None (shown as n/a) when nothing was measured, so
    a run whose requests all failed never reads as a 0 ms latency."""
    stats = stats_ms(values_s, name, (90, 99))
    return {key: (value if values_s else None) for key, value in stats.items()}


def summarize(records: list[RequestRecord]) -> dict[str, Any]:
    done = [r for r in records if r.is_ok]
    start_s = min((r.sent_s for r in records), default=0.0)
    end_s = max((r.finish_s for r in records), default=0.0)
    duration = max(end_s - start_s, 1e-9)
    input_tokens = sum(r.input_tokens for r in done)
    output_tokens = sum(r.output_tokens or 0 for r in done)
    metrics: dict[str, Any] = totals(len(done), duration, input_tokens, output_tokens)
    metrics = {"completed": len(done), "failed": len(records) - len(done)} | metrics
    metrics |= _latency([r.ttft_s for r in done if r.ttft_s is not None], "ttft")
    metrics |= _latency([t for t in (r.tpot_s for r in done) if t is not None], "tpot")
    metrics |= _latency([gap for r in done for gap in r.itl_s], "itl")
    metrics |= _latency([r.e2el_s for r in done], "e2el")
    cached = [r.cached_tokens for r in done if r.cached_tokens is not None]
    if cached:
        metrics["total_cached_tokens"] = sum(cached)
    # answers streamed in one burst (a CPU-starved server or client): not timed token by token
    metrics["num_burst_streamed"] = timed(done, typical_gap(done)).count(False)
    metrics["errors"] = dict(Counter(r.error for r in records if r.error is not None))
    return metrics
