"""What `kvwise simulate` prints: a rich table (one column per configuration) or JSON.

JSON: the base configuration's metrics at the top level under vLLM's `bench serve
--save-result` keys (so they diff against a real run), the deployment and workload next to
them, and `compare` (a list of {label, config, metrics}) when several configurations ran.
`engine` says whose scheduler ran: under SGLang, `num_preemptions` counts retractions (also
given as `num_retractions`), and no error band is given (the bands are vLLM measurements).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kvwise.core.gpus import GpuSpec
from kvwise.planner.warnings import unofficial_build_warning
from kvwise.sim.bands import Band, bands_for
from kvwise.sim.deploy import Deployment
from kvwise.sim.runner import SimResult
from kvwise.sim.sglang_deploy import SglangDeployment
from kvwise.sim.workloads import WorkloadSpec

AnyDeployment = Deployment | SglangDeployment
# why SGLang's figures carry no band: every scored measurement is of vLLM (`bands.py`)
SGLANG_NO_BANDS = (
    "no error band for SGLang: the out-of-sample bands are measured on vLLM serving runs, and no "
    "SGLang serving measurement has been scored"
)

QUEUEING_TTFT_OVER_TPOT = 5.0  # median TTFT this many TPOTs: requests wait many steps
QUEUEING_MIN_TTFT_MS = 500.0  # and long enough for a user to notice

# (label, metric key, format) rows of the table
ROWS: tuple[tuple[str, str, str], ...] = (
    ("completed / rejected", "", ""),
    ("duration (s)", "duration", "{:.1f}"),
    ("requests/s", "request_throughput", "{:.2f}"),
    ("output tokens/s", "output_throughput", "{:.0f}"),
    ("TTFT mean / median / p99 (ms)", "ttft", ""),
    ("TPOT mean / median / p99 (ms)", "tpot", ""),
    ("ITL mean / median (ms)", "itl", ""),
    ("E2E mean / median / p99 (s)", "e2el", ""),
    ("queue time mean (ms)", "mean_queue_ms", "{:.0f}"),
    ("preemptions", "num_preemptions", "{:d}"),
    ("KV use max / mean", "kv", ""),
    ("prefix-cache hit rate", "prefix_cache_hit_rate", "{:.0%}"),
)


@dataclass(frozen=True)
class Run:
    label: str
    deployment: AnyDeployment
    result: SimResult


def _is_sglang(runs: list[Run]) -> bool:
    return isinstance(runs[0].deployment, SglangDeployment)


def _sglang_config_json(dep: SglangDeployment) -> dict[str, Any]:
    """SGLang's own names for what its planner sized and its scheduler runs with."""
    engine, plan = dep.config.engine, dep.plan
    return {
        "sglang_family": plan.family,
        "flags": {
            "mem_fraction_static": round(plan.mem_fraction_static, 4),
            "max_running_requests": plan.max_running_requests,
            "chunked_prefill_size": plan.chunked_prefill_size,
            "cuda_graph_max_bs": plan.cuda_graph_max_bs,
            "context_length": plan.context_length,
            "tp_size": plan.tp,
            "schedule_policy": dep.schedule_policy,
            "disable_radix_cache": not dep.radix_cache,
            "page_size": engine.block_size,
        },
        "max_total_num_tokens": plan.max_total_num_tokens,
        "kv_tokens": plan.max_total_num_tokens,
        "step_time_coefficients": dep.config.coefficients.to_json(),
        "step_time_source": dep.coefficients_note,
    }


def config_json(dep: AnyDeployment) -> dict[str, Any]:
    if isinstance(dep, SglangDeployment):
        return _sglang_config_json(dep)
    engine, plan = dep.config.engine, dep.plan
    return {
        "vllm_version": plan.vllm_version,
        "engine": plan.engine,
        "flags": asdict(plan.flags),
        "num_gpu_blocks": engine.num_gpu_blocks,
        "block_size": engine.block_size,
        "kv_tokens": (engine.num_gpu_blocks - 1) * engine.block_size,
        "step_time_coefficients": dep.config.coefficients.to_json(),
        "step_time_source": dep.coefficients_note,
    }


def simulation_json(
    model_id: str, gpu: GpuSpec, spec: WorkloadSpec, seed: int, runs: list[Run]
) -> dict[str, Any]:
    base, sglang = runs[0], _is_sglang(runs)
    payload: dict[str, Any] = {
        "model": model_id,
        "gpu": {"name": gpu.name, "memory_gib": round(gpu.memory_gib, 3)},
        "engine": "sglang" if sglang else "vllm",
        "workload": asdict(spec),
        "seed": seed,
        "config": config_json(base.deployment),
    }
    payload |= _metrics_json(base.result, sglang)
    payload["bands"] = None if sglang else bands_json(gpu, spec, base.result)
    if sglang:
        payload["bands_note"] = SGLANG_NO_BANDS
    if len(runs) > 1:
        payload["compare"] = [
            {
                "label": r.label,
                "config": config_json(r.deployment),
                "metrics": _metrics_json(r.result, sglang),
                "bands": None if sglang else bands_json(gpu, spec, r.result),
            }
            for r in runs
        ]
    return payload


def _metrics_json(result: SimResult, sglang: bool) -> dict[str, Any]:
    metrics = _rounded(result.metrics)
    if sglang:  # SGLang's word for it (sglang:num_retracted_requests_total)
        metrics["num_retractions"] = metrics["num_preemptions"]
        metrics["num_retracted_requests"] = metrics["num_preempted_requests"]
    return metrics


def bands_json(gpu: GpuSpec, spec: WorkloadSpec, result: SimResult) -> dict[str, Any]:
    """Per banded metric: the prediction, its out-of-sample error band and the measurements
    that band allows (`kvwise.sim.bands`)."""
    found = bands_for(gpu.name, spec, result.metrics)
    payload: dict[str, Any] = {}
    for metric, b in found.items():
        predicted = result.metrics[metric]
        allowed = b.measured_range(predicted)
        payload[metric] = b.as_json() | {
            "predicted": round(predicted, 6),
            "measured_range": [round(v, 6) for v in allowed] if allowed else None,
        }
    return payload


BAND_LABELS = {
    "output_throughput": ("output", "tok/s", "{:,.0f}"),
    "mean_tpot_ms": ("mean TPOT", "ms", "{:,.1f}"),
    "median_ttft_ms": ("median TTFT", "ms", "{:,.0f}"),
}


def band_line(metric: str, predicted: float, b: Band) -> str:
    """ "output 944 tok/s (80% of out-of-sample cases within -25% to +12%, datacenter/overload, n=156)"."""
    name, unit, fmt = BAND_LABELS[metric]
    return f"{name} {fmt.format(predicted)} {unit} ({b.text()})"


def _rounded(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in metrics.items()}


def _cell(metrics: dict[str, Any], key: str, fmt: str) -> str:
    m = metrics
    if key == "":
        return f"{m['completed']} / {m['rejected']}"
    if key in ("ttft", "tpot"):
        return f"{m[f'mean_{key}_ms']:.0f} / {m[f'median_{key}_ms']:.0f} / {m[f'p99_{key}_ms']:.0f}"
    if key == "itl":
        return f"{m['mean_itl_ms']:.1f} / {m['median_itl_ms']:.1f}"
    if key == "e2el":
        return f"{m['mean_e2el_ms'] / 1000:.2f} / {m['median_e2el_ms'] / 1000:.2f} / {m['p99_e2el_ms'] / 1000:.2f}"
    if key == "kv":
        return f"{m['max_kv_usage']:.0%} / {m['mean_kv_usage']:.0%}"
    return fmt.format(m[key])


def verdicts(result: SimResult) -> list[str]:
    """Plain-language findings: preemption (SGLang: retraction), queueing, rejections."""
    m, found = result.metrics, []
    sglang = result.config.engine.scheduler == "sglang"
    if m["rejected"]:
        limit = result.config.engine.max_model_len
        what = "SGLang's limit" if sglang else "max_model_len"
        found.append(f"{m['rejected']} requests rejected (prompt + max_tokens > {what} {limit})")
    if m["num_preemptions"] and sglang:
        found.append(
            f"KV pool full: {m['num_preemptions']} retractions hit "
            f"{m['num_preempted_requests']} requests (SGLang frees the request with the fewest "
            "generated tokens, requeues it at the end of the waiting queue and recomputes it; "
            "its prompt stays in the radix cache)"
        )
    elif m["num_preemptions"]:
        found.append(
            f"KV pool full: {m['num_preemptions']} preemptions (recomputed from scratch) "
            f"hit {m['num_preempted_requests']} requests"
        )
    ttft, tpot = m["median_ttft_ms"], m["median_tpot_ms"]
    if ttft > QUEUEING_MIN_TTFT_MS and ttft > QUEUEING_TTFT_OVER_TPOT * tpot:
        found.append(
            f"requests queue: median TTFT {m['median_ttft_ms'] / 1000:.2f} s, "
            f"{m['mean_queue_ms'] / 1000:.2f} s waiting on average"
        )
    return found


def _sglang_deployment_line(run: Run, dep: SglangDeployment) -> str:
    plan = dep.plan
    radix = "radix cache on" if dep.radix_cache else "radix cache off (--disable-radix-cache)"
    return (
        f"  {run.label}: KV pool {plan.max_total_num_tokens:,} tokens (max_total_num_tokens, "
        f"page_size 1, {radix}), mem_fraction_static {plan.mem_fraction_static:.3f}, "
        f"max_running_requests {plan.max_running_requests}, chunked_prefill_size "
        f"{plan.chunked_prefill_size}, context_length {plan.context_length:,}, "
        f"schedule_policy {dep.schedule_policy}"
    )


def _deployment_line(run: Run) -> str:
    if isinstance(run.deployment, SglangDeployment):
        line = _sglang_deployment_line(run, run.deployment)
        budget = run.deployment.config.history_budget_tokens
        if budget is not None:
            line += f"; agent histories trimmed to {budget:,} tokens as `kvwise serve` does"
        return line
    e, kv = run.deployment.config.engine, run.deployment.plan.kv
    line = (
        f"  {run.label}: KV pool {kv.tokens:,} tokens ({e.num_gpu_blocks:,} blocks of "
        f"{e.block_size}), max_num_seqs {e.max_num_seqs}, max_num_batched_tokens "
        f"{e.max_num_batched_tokens}, max_model_len {e.max_model_len:,}"
    )
    if run.deployment.gpus_note:
        tp, pp = (
            run.deployment.plan.flags.tensor_parallel_size,
            run.deployment.plan.flags.pipeline_parallel_size,
        )
        line += f"; TP {tp} x PP {pp} on {run.deployment.gpus_note}"
    budget = run.deployment.config.history_budget_tokens
    if budget is not None:
        line += (
            f"; agent histories trimmed to {budget:,} tokens as `kvwise serve --session-history` "
            "does (--no-history-trimming: sent whole)"
        )
    return line


def print_report(
    model_id: str,
    gpu: GpuSpec,
    spec: WorkloadSpec,
    seed: int,
    runs: list[Run],
    *,
    plot_path: str | None = None,
) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    base = runs[0].deployment
    server = (
        f"SGLang {base.plan.family} (its scheduler: radix cache, prefill first, retraction)"
        if isinstance(base, SglangDeployment)
        else f"vLLM {base.plan.vllm_version} ({base.plan.engine})"
    )
    console.print(f"[bold]{model_id}[/] on {gpu.name} ({gpu.memory_gib:.1f} GiB), {server}")
    unofficial = None if _is_sglang(runs) else unofficial_build_warning(gpu)
    if unofficial is not None:
        console.print(f"[yellow]warning:[/] {unofficial}", highlight=False)
    console.print(f"workload: {runs[0].result.workload.description} (seed {seed})")
    for run in runs:
        console.print(_deployment_line(run), soft_wrap=True)
    table = Table(show_header=True, header_style="bold")
    table.add_column("metric")
    for run in runs:
        table.add_column(run.label, justify="right")
    for label, key, fmt in ROWS:
        if key == "num_preemptions" and _is_sglang(runs):
            label = "retractions"
        table.add_row(label, *(_cell(r.result.metrics, key, fmt) for r in runs))
    console.print(table)
    for run in runs:
        for finding in verdicts(run.result):
            prefix = f"{run.label}: " if len(runs) > 1 else ""
            console.print(f"[yellow]![/] {prefix}{finding}")
    for run in runs if not _is_sglang(runs) else []:
        found = bands_for(gpu.name, spec, run.result.metrics)
        prefix = f"{run.label}: " if len(runs) > 1 else ""
        lines = [band_line(m, run.result.metrics[m], b) for m, b in found.items()]
        console.print(f"{prefix}error bands ({next(iter(found.values())).regime} regime):")
        for line in lines:
            console.print(f"  {line}", soft_wrap=True)
    if _is_sglang(runs):
        console.print(
            f"[dim]{SGLANG_NO_BANDS}; step time: the same model as vLLM's on this card "
            "(kernels are not compared)[/]"
        )
    for note in dict.fromkeys(run.deployment.coefficients_note for run in runs):
        console.print(f"[dim]{note}[/]", soft_wrap=True)  # a path stays one piece
    if plot_path:
        console.print(f"charts: {plot_path}")
