"""vLLM bench's figures from request records, checked by hand."""

from __future__ import annotations

import pytest

from kvwise.bench.records import RequestRecord
from kvwise.bench.summary import summarize


def record(
    sent_s: float, ttft_s: float | None, itl_s: list[float], **fields: object
) -> RequestRecord:
    values: dict[str, object] = {
        "session": 0,
        "turn": 0,
        "sent_s": sent_s,
        "ttft_s": ttft_s,
        "itl_s": itl_s,
        "e2el_s": (ttft_s or 0.0) + sum(itl_s),
        "prompt_tokens": 100,
        "output_tokens": len(itl_s) + 1,
        "planned_prompt_tokens": 90,
        "planned_output_tokens": len(itl_s) + 1,
        "new_segments": [(1, 90)],
    }
    values.update(fields)
    return RequestRecord.model_validate(values)


def test_figures_follow_vllm_bench_definitions() -> None:
    records = [
        record(0.0, 0.1, [0.02, 0.02, 0.02]),  # 4 tokens, ends at 0.16
        record(0.5, 0.3, [0.05], prompt_tokens=None),  # 2 tokens; no usage: planned prompt (90)
        record(1.0, None, [], output_tokens=None, e2el_s=0.2, error="HTTP 400: too long"),
    ]
    metrics = summarize(records)
    assert metrics["completed"] == 2 and metrics["failed"] == 1
    assert metrics["duration"] == pytest.approx(1.2)  # first sent (0.0) to last end (1.2)
    assert metrics["total_input_tokens"] == 190 and metrics["total_output_tokens"] == 6
    assert metrics["output_throughput"] == pytest.approx(6 / 1.2)
    assert metrics["mean_ttft_ms"] == pytest.approx(200.0)
    assert metrics["mean_tpot_ms"] == pytest.approx((20.0 + 50.0) / 2)  # per request, then mean
    assert metrics["mean_itl_ms"] == pytest.approx((20 * 3 + 50) / 4)  # pooled over gaps
    assert metrics["median_itl_ms"] == pytest.approx(20.0)
    assert metrics["errors"] == {"HTTP 400: too long": 1}


def test_a_run_whose_requests_all_failed_shows_n_a_not_zero_latencies() -> None:
    from rich.console import Console

    from kvwise.bench.report import terminal_report
    from kvwise.bench.results import BenchResults, RunResult, ServerInfo

    failed = [record(0.0, None, [], output_tokens=None, error="HTTP 400: too long")] * 3
    metrics = summarize(failed)
    assert metrics["completed"] == 0 and metrics["mean_ttft_ms"] is None
    run = RunResult(max_concurrency=None, request_rate=None, metrics=metrics, requests=failed)
    results = BenchResults(
        date="2026-01-01T00:00:00+00:00",
        kvwise_version="0",
        server=ServerInfo(url="http://127.0.0.1:1", model="m"),
        workload={},
        seed=0,
        tokenizer="estimate",
        runs=[run],
    )
    console = Console(record=True, width=120)
    terminal_report(results, console)
    rows = {line.split()[1]: line for line in console.export_text().splitlines() if "_ms" in line}
    assert "n/a" in rows["mean_ttft_ms"] and " 0 " not in rows["mean_ttft_ms"]
