"""`kvwise plan MODEL --gpu G --workload ... --engine vllm,sglang`: which engine serves it better.

Both engines are planned for the card (vLLM's planner, SGLang's per release) and simulated on the
same workload and seed: vLLM with its scheduler, SGLang with its variant (`sim.sglang_scheduler`:
token-granular radix cache, prefill-first batches, answer-room reservation, retraction). The
step-time model is the same for both, so the comparison is of memory and scheduling, not of
kernels. The engine that meets the objectives (--slo-*), then gives more output tokens per
second (within 2 %: a tie), then the lower p99 TTFT, is recommended, with the reasons in
numbers; preemptions and retractions, pool sizes and cache hits are reported as the causes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from kvwise.advisor.evaluate import Objectives
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.errors import KvwiseError
from kvwise.planner.sglang import SglangFlags
from kvwise.sim.deploy import deployment
from kvwise.sim.runner import SimConfig, simulate
from kvwise.sim.sglang_deploy import sglang_deployment
from kvwise.sim.workloads import Workload, WorkloadSpec, build_workload, describe
from kvwise.sim.workloads import history_budget_tokens as trim_budget

NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
SAME_WITHIN = 0.02  # throughputs within 2 % are a tie: the step-time model is not that exact


@dataclass(frozen=True)
class EngineRun:
    engine: str
    pool_tokens: int
    max_running: int
    context_length: int
    settings: str  # the engine's own words for the knobs that set the pool and the batch
    metrics: dict[str, Any] | None  # None: it would not start (note says why)
    note: str = ""


@dataclass(frozen=True)
class Comparison:
    workload: str
    runs: tuple[EngineRun, ...]
    best: EngineRun | None
    reasons: tuple[str, ...]
    objectives: Objectives


def _simulate(config: SimConfig, workload: Workload, seed: int, trim: bool) -> dict[str, Any]:
    budget = trim_budget(workload, config.engine.max_model_len, trim_history=trim)
    return dict(simulate(replace(config, history_budget_tokens=budget), workload, seed).metrics)


def _vllm_run(
    model: ModelSpec, gpu: GpuSpec, flags: VllmFlags, version: str | None, run: tuple[Any, ...]
) -> EngineRun:
    try:
        deployed = deployment(model, gpu, flags, vllm_version=version)
    except KvwiseError as exc:
        return EngineRun("vllm", 0, 0, 0, "", None, str(exc))
    plan, engine = deployed.plan, deployed.config.engine
    settings = (
        f"vLLM {plan.vllm_version}: gpu_memory_utilization {plan.flags.gpu_memory_utilization}, "
        f"block_size {engine.block_size}, max_num_batched_tokens {engine.max_num_batched_tokens}"
    )
    metrics = _simulate(deployed.config, *run)
    return EngineRun(
        "vllm", plan.kv.tokens, engine.max_num_seqs, engine.max_model_len, settings, metrics
    )


def _sglang_run(
    model: ModelSpec, gpu: GpuSpec, flags: VllmFlags, sglang: SglangFlags, run: tuple[Any, ...]
) -> EngineRun:
    try:
        deployed = sglang_deployment(model, gpu, flags, sglang)
    except KvwiseError as exc:
        return EngineRun("sglang", 0, 0, 0, "", None, str(exc))
    plan = deployed.plan
    settings = (
        f"SGLang {plan.family}: mem_fraction_static {plan.mem_fraction_static:.3f}, page_size 1, "
        f"chunked_prefill_size {plan.chunked_prefill_size}, schedule_policy "
        f"{deployed.schedule_policy}"
    )
    metrics = _simulate(deployed.config, *run)
    return EngineRun(
        "sglang",
        plan.max_total_num_tokens,
        plan.max_running_requests,
        plan.context_length,
        settings,
        metrics,
    )


def _meets(m: dict[str, Any], objectives: Objectives) -> bool:
    if m["rejected"]:
        return False
    if objectives.ttft_p99_ms is not None and m["p99_ttft_ms"] > objectives.ttft_p99_ms:
        return False
    return objectives.tpot_mean_ms is None or m["mean_tpot_ms"] <= objectives.tpot_mean_ms


def _key(run: EngineRun, objectives: Objectives, top: tuple[float, float]) -> tuple[float, ...]:
    """Objectives met, then throughput, then p99 TTFT (each within 2 %: a tie), then pool."""
    m = run.metrics
    if m is None:
        return (2.0, 0.0, 0.0, 0.0)
    top_throughput, best_ttft = top
    return (
        0.0 if _meets(m, objectives) else 1.0,
        -top_throughput if _tied(m, top) else -m["output_throughput"],
        best_ttft if m["p99_ttft_ms"] <= best_ttft * (1 + SAME_WITHIN) else m["p99_ttft_ms"],
        -run.pool_tokens,
    )


def _tied(m: dict[str, Any], top: tuple[float, float]) -> bool:
    return m["output_throughput"] >= top[0] * (1 - SAME_WITHIN)


def _top(*metrics: dict[str, Any]) -> tuple[float, float]:
    return max(m["output_throughput"] for m in metrics), min(m["p99_ttft_ms"] for m in metrics)


def _pct(value: float) -> str:
    return f"{value * 100:.1f} %"


def _reasons(best: EngineRun, other: EngineRun, objectives: Objectives) -> list[str]:
    b, o = best.metrics, other.metrics
    name, other_name = NAMES[best.engine], NAMES[other.engine]
    if o is None:
        return [other.note]  # "vLLM would not start: ..." in the engine's words
    assert b is not None
    reasons = []
    if objectives.is_set and _meets(b, objectives) != _meets(o, objectives):
        reasons.append(f"only {name} meets {objectives.describe()}")
    elif _key(best, objectives, _top(b, o))[:3] == _key(other, objectives, _top(b, o))[:3]:
        reasons.append(
            f"a tie within {SAME_WITHIN:.0%} on throughput and p99 TTFT: either engine serves "
            f"this load; {name} has the larger KV pool, the more room if the load grows"
        )
    reasons.append(
        f"output {b['output_throughput']:,.1f} vs {o['output_throughput']:,.1f} tok/s, "
        f"p99 TTFT {b['p99_ttft_ms'] / 1000:,.2f} vs {o['p99_ttft_ms'] / 1000:,.2f} s, "
        f"mean TPOT {b['mean_tpot_ms']:,.1f} vs {o['mean_tpot_ms']:,.1f} ms"
    )
    if best.pool_tokens != other.pool_tokens:
        more = best if best.pool_tokens > other.pool_tokens else other
        reasons.append(
            f"KV pool {best.pool_tokens:,} vs {other.pool_tokens:,} tokens: {NAMES[more.engine]}'s "
            f"is larger ({more.settings.split(': ', 1)[1].split(',')[0]})"
        )
    hit_b, hit_o = b["prefix_cache_hit_rate"], o["prefix_cache_hit_rate"]
    if abs(hit_b - hit_o) >= 0.001:
        reasons.append(
            f"prefix-cache hits {_pct(hit_b)} vs {_pct(hit_o)} of prompt tokens (SGLang's radix "
            "cache matches to the token, vLLM's to the 16-token block; the larger pool keeps "
            "more history cached)"
        )
    if b["num_preemptions"] != o["num_preemptions"]:
        reasons.append(
            f"{name} {'retracts' if best.engine == 'sglang' else 'preempts'} "
            f"{b['num_preemptions']} time(s), {other_name} "
            f"{'retracts' if other.engine == 'sglang' else 'preempts'} {o['num_preemptions']} "
            "(SGLang reserves room for the answers at admission and retracts the request with the "
            "fewest generated tokens; vLLM reserves none and preempts the newest, by recompute)"
        )
    if b["rejected"] != o["rejected"]:
        reasons.append(f"requests rejected: {b['rejected']} vs {o['rejected']}")
    return reasons


def compare(
    model: ModelSpec,
    gpu: GpuSpec,
    flags: VllmFlags,
    spec: WorkloadSpec,
    *,
    sglang: SglangFlags,
    objectives: Objectives,
    vllm_version: str | None = None,
    seed: int = 0,
    trim_history: bool = True,
) -> Comparison:
    workload = build_workload(spec, random.Random(seed))
    run = (workload, seed, trim_history)
    runs = (
        _vllm_run(model, gpu, flags, vllm_version, run),
        _sglang_run(model, gpu, flags, sglang, run),
    )
    started = [r.metrics for r in runs if r.metrics]
    top = (
        max((m["output_throughput"] for m in started), default=0.0),
        min((m["p99_ttft_ms"] for m in started), default=0.0),
    )
    ranked = sorted(runs, key=lambda r: _key(r, objectives, top))
    best = ranked[0] if ranked[0].metrics is not None else None
    reasons = tuple(_reasons(best, ranked[1], objectives)) if best else ()
    return Comparison(describe(spec), runs, best, reasons, objectives)
