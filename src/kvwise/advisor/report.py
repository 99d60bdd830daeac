"""The recommendation as a reader wants it: the answer, the numbers behind it, and why."""

from __future__ import annotations

import shlex
from typing import Any

from kvwise.advisor import Recommendation
from kvwise.advisor.evaluate import Evaluation
from kvwise.core.gpus import GIB
from kvwise.planner.defaults import default_flags
from kvwise.planner.report import vllm_command
from kvwise.planner.sglang import plan_sglang, sglang_command

TOP = 3


def _metrics_row(evaluation: Evaluation) -> dict[str, Any]:
    m = evaluation.metrics or {}
    kv = evaluation.plan.kv
    return {
        "kv_tokens": kv.tokens,
        "kv_cache_gib": round(evaluation.plan.memory.kv_cache_bytes / GIB, 2),
        "median_ttft_ms": round(m.get("median_ttft_ms", 0.0), 1),
        "p99_ttft_ms": round(m.get("p99_ttft_ms", 0.0), 1),
        "mean_tpot_ms": round(m.get("mean_tpot_ms", 0.0), 2),
        "output_throughput": round(m.get("output_throughput", 0.0), 1),
        "num_preemptions": m.get("num_preemptions", 0),
        "max_kv_usage": round(m.get("max_kv_usage", 0.0), 3),
        "prefix_cache_hit_rate": round(m.get("prefix_cache_hit_rate", 0.0), 3),
        "rejected": m.get("rejected", 0),
    }


def commands(evaluation: Evaluation, gpu_name: str) -> dict[str, str]:
    candidate, result = evaluation.candidate, evaluation.plan
    defaults = default_flags(candidate.model, result.gpu, result.vllm_version)
    serve = vllm_command(candidate.model.model_id, result.flags, defaults)
    if candidate.replicas > 1:
        lines = []
        for index in range(candidate.replicas):
            devices = ",".join(str(index * candidate.tp + g) for g in range(candidate.tp))
            lines.append(f"CUDA_VISIBLE_DEVICES={devices} {serve} --port {8000 + index}")
        serve = " &\n".join(lines)
    sglang = sglang_command(
        plan_sglang(candidate.model, result.gpu, candidate.flags), candidate.flags
    )
    gateway = ["kvwise", "serve", candidate.model.model_id, "--gpu", gpu_name, "--launch"]
    gateway += (
        serve.split("\n")[0].split(candidate.model.model_id, 1)[1].split(" --port")[0].split()
    )
    if candidate.replicas > 1:
        gateway += ["--replicas", str(candidate.replicas)]
    gateway.append("--session-history")
    return {
        "vllm": serve,
        "sglang": sglang,
        "kvwise_serve": " ".join(shlex.quote(p) for p in gateway),
    }


def _distinguishing_knob(best: Evaluation, other: Evaluation) -> str | None:
    """How `other` differs from `best`, when it differs in exactly one knob."""
    fa, fb = best.plan.flags, other.plan.flags
    diffs = []
    if best.candidate.model.model_id != other.candidate.model.model_id:
        quant = other.candidate.model.quant
        diffs.append(
            f"the {quant.label if quant else fb.dtype} checkpoint {other.candidate.model.model_id}"
        )
    if fa.kv_cache_dtype != fb.kv_cache_dtype:
        diffs.append(f"--kv-cache-dtype {fb.kv_cache_dtype}")
    if fa.enforce_eager != fb.enforce_eager:
        diffs.append("--enforce-eager" if fb.enforce_eager else "CUDA graphs (no --enforce-eager)")
    if fa.tensor_parallel_size != fb.tensor_parallel_size:
        diffs.append(f"--tensor-parallel-size {fb.tensor_parallel_size}")
    return diffs[0] if len(diffs) == 1 else None


def _comparison(best: Evaluation, other: Evaluation) -> str:
    mb, mo = best.metrics or {}, other.metrics or {}
    return (
        f"KV pool {best.plan.kv.tokens:,} vs {other.plan.kv.tokens:,} tokens, p99 TTFT "
        f"{mb.get('p99_ttft_ms', 0) / 1000:,.1f} vs {mo.get('p99_ttft_ms', 0) / 1000:,.1f} s, mean TPOT "
        f"{mb.get('mean_tpot_ms', 0):.1f} vs {mo.get('mean_tpot_ms', 0):.1f} ms, preemptions "
        f"{mb.get('num_preemptions', 0)} vs {mo.get('num_preemptions', 0)}, "
        f"{mb.get('output_throughput', 0):,.0f} vs {mo.get('output_throughput', 0):,.0f} output tok/s"
    )


def _context_reason(rec: Recommendation, best: Evaluation) -> str | None:
    limit = best.plan.flags.max_model_len
    if rec.required_len <= limit:
        return None
    return (
        f"Agent histories reach {rec.required_len:,} tokens, past the {limit:,}-token context: sent whole, "
        "vLLM answers 400 and the session dies. The gateway keeps the history and trims it (system prompt "
        f"kept, oldest turns dropped down to half of {limit:,}, so later turns extend a cached prefix): "
        "`kvwise serve --session-history`. Every simulation here trims the same way."
    )


def reasons(rec: Recommendation) -> list[str]:
    """Why the winner wins: the demand, what the defaults do, and each knob's isolated effect."""
    best, base = rec.best, rec.baseline
    out = [
        f"Demand: together the sessions hold up to {rec.demand_tokens:,} tokens of KV cache at their longest "
        "(the shared system prompt counted once, as vLLM's prefix cache shares it)."
    ]
    if base.metrics is None:
        kind = base.plan.error.kind if base.plan.error else base.note
        out.append(
            f"With your flags and vLLM's defaults for the rest, vLLM does not start ({kind})."
        )
    else:
        m = base.metrics
        out.append(
            f"With your flags and vLLM's defaults for the rest, the pool holds {base.plan.kv.tokens:,} tokens: "
            f"{m['num_preemptions']} preemptions, p99 TTFT {m['p99_ttft_ms'] / 1000:,.1f} s, mean TPOT "
            f"{m['mean_tpot_ms']:.1f} ms, {m['output_throughput']:,.0f} output tok/s."
        )
    if best is None:
        return [*out, "No candidate starts on this hardware."]
    context = _context_reason(rec, best)
    if context:
        out.append(context)
    for other in rec.ranked[1:]:
        knob = _distinguishing_knob(best, other)
        if knob is not None:
            out.append(f"Compared with {knob}: {_comparison(best, other)}.")
    return out


def to_json(rec: Recommendation, gpu_name: str) -> dict[str, Any]:
    def entry(e: Evaluation) -> dict[str, Any]:
        return {
            "label": e.candidate.label(),
            "model": e.candidate.model.model_id,
            "replicas": e.candidate.replicas,
            "meets_objectives": e.meets(rec.objectives),
            "flags": e.plan.to_json()["flags"],
            "predicted": _metrics_row(e),
            "commands": commands(e, gpu_name),
        }

    return {
        "workload": rec.workload.description,
        "objectives": {
            "p99_ttft_ms": rec.objectives.ttft_p99_ms,
            "mean_tpot_ms": rec.objectives.tpot_mean_ms,
        },
        "required_max_model_len": rec.required_len,
        "peak_kv_demand_tokens": rec.demand_tokens,
        "baseline": None if rec.baseline.metrics is None else _metrics_row(rec.baseline),
        "baseline_error": rec.baseline.plan.error.kind if rec.baseline.plan.error else None,
        "recommendations": [entry(e) for e in rec.ranked[:TOP]],
        "why": reasons(rec),
        "step_time_model": rec.best.step_time if rec.best else None,
        "candidates_simulated": len(rec.ranked),
        "candidates_refused": [
            {"label": e.candidate.label(), "reason": e.note} for e in rec.refused
        ],
    }


def render(rec: Recommendation, console: Any, gpu_name: str) -> None:
    from rich import box
    from rich.table import Table

    console.print(f"[bold]Workload:[/] {rec.workload.description}", highlight=False)
    table = Table(title="Best configurations (simulated)", title_justify="left", box=box.SIMPLE)
    table.add_column("#", justify="right", no_wrap=True, min_width=1)
    table.add_column("configuration", no_wrap=True)
    for column in ("KV", "TTFT p99 s", "TPOT ms", "tok/s", "preempt"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("SLO", no_wrap=True, min_width=3)
    for index, e in enumerate(rec.ranked[:TOP], start=1):
        row = _metrics_row(e)
        table.add_row(
            str(index),
            e.candidate.label(),
            f"{row['kv_tokens'] / 1000:,.0f}k",
            f"{row['p99_ttft_ms'] / 1000:,.1f}",
            f"{row['mean_tpot_ms']:.1f}",
            f"{row['output_throughput']:,.0f}",
            str(row["num_preemptions"]),
            "yes" if e.meets(rec.objectives) else "no",
        )
    console.print(table)
    if rec.best is not None:
        console.print(f"[dim]{rec.best.step_time}[/]", highlight=False)
    console.print("[bold]Why:[/]")
    for line in reasons(rec):
        console.print(f"  - {line}", highlight=False)
    if rec.best is not None:
        cmds = commands(rec.best, gpu_name)
        console.print("\n[bold]Run it:[/]")
        console.print(cmds["vllm"], markup=False, highlight=False)
        console.print("[bold]SGLang equivalent:[/]")
        console.print(cmds["sglang"], markup=False, highlight=False)
        console.print(
            "[bold]Behind kvwise's gateway (KV-token admission, fair queue, sessions):[/]"
        )
        console.print(cmds["kvwise_serve"], markup=False, highlight=False)
