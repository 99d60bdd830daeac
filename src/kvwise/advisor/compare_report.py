"""The two-engine comparison as text and as JSON (`plan --workload ... --engine vllm,sglang`)."""

from __future__ import annotations

from typing import Any

from kvwise.advisor.compare import NAMES, Comparison, EngineRun

FIGURES = (
    ("output_throughput", "output tok/s", "{:,.1f}"),
    ("median_ttft_ms", "median TTFT ms", "{:,.0f}"),
    ("p99_ttft_ms", "p99 TTFT ms", "{:,.0f}"),
    ("mean_tpot_ms", "mean TPOT ms", "{:,.1f}"),
    ("num_preemptions", "preemptions / retractions", "{:,}"),
    ("prefix_cache_hit_rate", "prefix-cache hit rate", "{:.3f}"),
    ("max_kv_usage", "peak KV use", "{:.3f}"),
    ("rejected", "rejected", "{:,}"),
)


def _run_json(run: EngineRun) -> dict[str, Any]:
    m = run.metrics
    return {
        "engine": run.engine,
        "starts": m is not None,
        "note": run.note or None,
        "settings": run.settings,
        "kv_pool_tokens": run.pool_tokens,
        "max_running_requests": run.max_running,
        "context_length": run.context_length,
        "metrics": {key: m[key] for key, _, _ in FIGURES} if m else None,
    }


def to_json(result: Comparison) -> dict[str, Any]:
    return {
        "workload": result.workload,
        "objectives": result.objectives.describe() or None,
        "recommended_engine": result.best.engine if result.best else None,
        "reasons": list(result.reasons),
        "engines": [_run_json(run) for run in result.runs],
        "step_time": "the same step-time model for both engines: kernels are not compared",
    }


def render_text(result: Comparison) -> str:
    lines = [f"workload: {result.workload}"]
    width = max(len(label) for _, label, _ in FIGURES) + 2
    header = "".join(f"{NAMES[r.engine]:>14}" for r in result.runs)
    lines.append(f"{'':<{width}}{header}")
    lines.append(
        f"{'KV pool tokens':<{width}}" + "".join(f"{r.pool_tokens:>14,}" for r in result.runs)
    )
    for key, label, fmt in FIGURES:
        cells = "".join(
            f"{fmt.format(r.metrics[key]) if r.metrics else 'no start':>14}" for r in result.runs
        )
        lines.append(f"{label:<{width}}{cells}")
    for run in result.runs:
        lines.append(f"  {run.settings or run.note}")
    if result.best is None:
        lines.append("neither engine starts with these flags")
        return "\n".join(lines)
    lines.append(f"recommended: {NAMES[result.best.engine]}, because")
    lines += [f"  - {reason}" for reason in result.reasons]
    lines.append("(same step-time model for both engines: memory and scheduling are compared)")
    return "\n".join(lines)
