"""The recommendation as a reader wants it: the answer, the numbers behind it, and why."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import replace
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


def sessions_carried(evaluation: Evaluation, rec: Recommendation) -> int:
    """Sessions whose KV fits at once at their longest, over all the layout's replicas (the
    workload's peak demand shared evenly; the shared system prompt counted once)."""
    num_sessions = len(rec.workload.sessions)
    per_session = rec.demand_tokens / max(1, num_sessions)
    total_tokens = evaluation.plan.kv.tokens * evaluation.candidate.replicas
    return num_sessions if per_session == 0 else min(num_sessions, int(total_tokens // per_session))


def layout(evaluation: Evaluation) -> dict[str, int]:
    c = evaluation.candidate
    return {"tensor_parallel_size": c.tp, "pipeline_parallel_size": c.pp,
            "replicas": c.replicas, "gpus": c.tp * c.pp * c.replicas}  # fmt: skip


def best_per_layout(rec: Recommendation) -> list[Evaluation]:
    """The best configuration of each way to split the GPUs (TP x PP x replicas), best first:
    the answer to "TP=2 or two replicas?" whatever else differs."""
    seen: dict[tuple[int, int, int], Evaluation] = {}
    for e in rec.ranked:
        seen.setdefault((e.candidate.tp, e.candidate.pp, e.candidate.replicas), e)
    return list(seen.values())


def commands(evaluation: Evaluation) -> dict[str, str]:
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
    card = result.gpu  # the catalog key --gpu takes, or the size of a card known only by size
    gpu_args = ["--gpu", card.key] if card.key else ["--gpu-memory-gib", f"{card.memory_gib:.2f}"]
    gateway = ["kvwise", "serve", candidate.model.model_id, *gpu_args, "--launch"]
    # the flags the gateway plans with (it does not pass unmodelled engine flags through)
    modelled = replace(result.flags, extra_args=())
    gateway += shlex.split(vllm_command(candidate.model.model_id, modelled, defaults))[3:]
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
    for extra in (_slo_reason(rec), _context_reason(rec, best)):
        if extra:
            out.append(extra)
    for other in rec.ranked[1:]:
        knob = _distinguishing_knob(best, other)
        if knob is not None:
            out.append(f"Compared with {knob}: {_comparison(best, other)}.")
    return out


def to_json(rec: Recommendation) -> dict[str, Any]:
    def entry(e: Evaluation) -> dict[str, Any]:
        return {
            "label": e.candidate.label(),
            "model": e.candidate.model.model_id,
            "replicas": e.candidate.replicas,
            "layout": layout(e),
            "sessions_carried": sessions_carried(e, rec),
            "meets_objectives": e.meets(rec.objectives) if rec.objectives.is_set else None,
            "flags": e.plan.to_json()["flags"],
            "predicted": _metrics_row(e),
            "bands": e.bands,
            "commands": commands(e),
        }

    return {
        "workload": rec.workload.description,
        "hardware": rec.topology_text,
        "objectives": {
            "p99_ttft_ms": rec.objectives.ttft_p99_ms,
            "mean_tpot_ms": rec.objectives.tpot_mean_ms,
        },
        "max_sessions_meeting_objectives": rec.max_sessions_meeting,
        "required_max_model_len": rec.required_len,
        "peak_kv_demand_tokens": rec.demand_tokens,
        "baseline": None if rec.baseline.metrics is None else _metrics_row(rec.baseline),
        "baseline_error": rec.baseline.plan.error.kind if rec.baseline.plan.error else None,
        "recommendations": [entry(e) for e in rec.ranked[:TOP]],
        "best_per_layout": [entry(e) for e in best_per_layout(rec)],
        "why": reasons(rec),
        "step_time_model": rec.best.step_time if rec.best else None,
        "candidates_simulated": len(rec.ranked),
        "candidates_refused": [
            {"label": e.candidate.label(), "reason": e.note} for e in rec.refused
        ],
    }


def _slo_cell(evaluation: Evaluation, rec: Recommendation) -> str:
    if not rec.objectives.is_set:
        return "—"  # no objective was given: nothing to meet
    return "yes" if evaluation.meets(rec.objectives) else "no"


def _slo_reason(rec: Recommendation) -> str | None:
    best, objectives = rec.best, rec.objectives
    if best is None or not objectives.is_set:
        return None
    if best.meets(objectives):
        return f"The first configuration meets {objectives.describe()}."
    m = best.metrics or {}
    line = (
        f"None of the {len(rec.ranked)} configurations that start meets {objectives.describe()} "
        f"on this hardware: the closest gives p99 TTFT {m.get('p99_ttft_ms', 0) / 1000:,.1f} s and "
        f"mean TPOT {m.get('mean_tpot_ms', 0):.1f} ms."
    )
    if rec.max_sessions_meeting is None:
        return line + " A smaller load, more GPUs (--num-gpus) or a smaller model would be needed."
    if rec.max_sessions_meeting == 0:
        return line + " Not even one session meets it: a faster GPU or a smaller model is needed."
    return (
        line + f" It meets them with at most {rec.max_sessions_meeting} sessions per GPU: "
        "more GPUs (--num-gpus) or fewer concurrent sessions."
    )


# The ranking's columns, most important first: a narrow terminal drops from the end rather
# than cutting a configuration (which names what to run) or a figure.
COLUMNS: tuple[tuple[str, Callable[[Evaluation, Recommendation], str]], ...] = (
    ("#", lambda e, rec: str(rec.ranked.index(e) + 1)),
    ("configuration", lambda e, rec: e.candidate.label()),
    ("TTFT p99 s", lambda e, rec: f"{_metrics_row(e)['p99_ttft_ms'] / 1000:,.1f}"),
    ("SLO", _slo_cell),
    ("tok/s", lambda e, rec: f"{_metrics_row(e)['output_throughput']:,.0f}"),
    ("KV", lambda e, rec: f"{_metrics_row(e)['kv_tokens'] / 1000:,.0f}k"),
    ("TPOT ms", lambda e, rec: f"{_metrics_row(e)['mean_tpot_ms']:.1f}"),
    ("carried", lambda e, rec: f"{sessions_carried(e, rec)}/{len(rec.workload.sessions)}"),
    ("preempt", lambda e, rec: str(_metrics_row(e)["num_preemptions"])),
    ("tok/s band", lambda e, rec: _band_cell(e, "output_throughput")),
)
CONFIGURATION_MIN_WIDTH = 18


def _band_cell(evaluation: Evaluation, metric: str) -> str:
    """ "-25 to +12%": the p10 to p90 out-of-sample error of this metric in this class and regime."""
    cell = (evaluation.bands or {}).get(metric) or {}
    low, high = cell.get("p10_relative_error"), cell.get("p90_relative_error")
    return "n/a" if low is None or high is None else f"{low * 100:+.0f} to {high * 100:+.0f}%"


CELL_PADDING = 3


def _table(rec: Recommendation, width: int) -> Any:
    from rich import box
    from rich.table import Table

    shown = list(COLUMNS)
    while len(shown) > 3 and _min_width(shown) > width:
        shown.pop()
    table = Table(title="Best configurations (simulated)", title_justify="left", box=box.SIMPLE)
    for name, _ in shown:
        if name == "configuration":
            table.add_column(name, overflow="fold", min_width=CONFIGURATION_MIN_WIDTH, ratio=1)
        else:
            table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    for e in rec.ranked[:TOP]:
        table.add_row(*(cell(e, rec) for _, cell in shown))
    return table


def _band_note(best: Evaluation) -> str:
    """The first configuration's bands, one line: what "predicted" is worth here."""
    parts = []
    for metric, cell in (best.bands or {}).items():
        low, high = cell["p10_relative_error"], cell["p90_relative_error"]
        figure = "no data" if low is None else f"{low:+.0%} to {high:+.0%}"
        parts.append(f"{metric} {figure}")
    cell = next(iter((best.bands or {}).values()), None)
    where = f" ({cell['cell']}, n={cell['n']})" if cell else ""
    return "80% of out-of-sample errors within: " + ", ".join(parts) + where


def _min_width(columns: list[tuple[str, Any]]) -> int:
    return sum(
        (CONFIGURATION_MIN_WIDTH if name == "configuration" else len(name)) + CELL_PADDING
        for name, _ in columns
    )


def render(rec: Recommendation, console: Any) -> None:
    console.print(f"[bold]Workload:[/] {rec.workload.description}", highlight=False)
    console.print(f"[bold]Hardware:[/] {rec.topology_text}", highlight=False)
    console.print(_table(rec, console.width))
    if rec.best is not None:
        console.print(f"[dim]{rec.best.step_time}[/]", highlight=False)
        console.print(f"[dim]{_band_note(rec.best)}[/]", highlight=False)
    console.print("[bold]Why:[/]")
    for line in reasons(rec):
        console.print(f"  - {line}", highlight=False)
    if rec.best is not None:
        cmds = commands(rec.best)
        console.print("\n[bold]Run it:[/]")
        console.print(cmds["vllm"], markup=False, highlight=False, soft_wrap=True)
        console.print("[bold]SGLang equivalent:[/]")
        console.print(cmds["sglang"], markup=False, highlight=False, soft_wrap=True)
        console.print(
            "[bold]Behind kvwise's gateway (KV-token admission, fair queue, sessions):[/]"
        )
        console.print(cmds["kvwise_serve"], markup=False, highlight=False, soft_wrap=True)
