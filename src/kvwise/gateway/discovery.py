"""Where the gateway's limits come from: flags, the plan, or the running engine itself.

The planner (`kvwise.planner.plan`) gives the KV tokens and `max_model_len` vLLM will have, when
a model and a GPU are named (`--engine sglang`: the SGLang planner's `max_total_num_tokens` and
context length). A running engine tells both too: `/v1/models` lists `max_model_len` (vLLM and
SGLang alike), and the pool size is in vLLM's `/metrics` (`vllm:cache_config_info`) or SGLang's
(`sglang:max_total_num_tokens`, newer releases) and `/server_info` (`/get_server_info` before
0.5.x; both merge the scheduler's `max_total_num_tokens`, managers/scheduler.py get_init_info).
Explicit flags win over both.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from kvwise.core.flags import flags_from_args
from kvwise.errors import UpstreamError, UsageError
from kvwise.gateway.replicas import parse_engine_metrics
from kvwise.gateway.upstream_http import UpstreamConnectionError, get_once

# vLLM's /metrics and /v1/models do not report it; until given, only the engine's reported
# waiting requests hold requests back
NO_MAX_NUM_SEQS = "not known (vLLM does not report max_num_seqs): pass --max-num-seqs"


@dataclass(frozen=True)
class PlannedLimits:
    kv_tokens: int
    max_model_len: int
    summary: str
    max_num_seqs: int | None = None
    sglang_args: tuple[str, ...] | None = None  # SGLang's planned launch flags (--engine sglang)
    tensor_parallel_size: int = 1


@dataclass(frozen=True)
class Limits:
    kv_budget_tokens: int
    kv_budget_source: str
    max_model_len: int
    max_model_len_source: str
    plan_summary: str | None
    max_num_seqs: int | None = None  # running sequences per replica; None: not known
    max_num_seqs_source: str = NO_MAX_NUM_SEQS


def plan_limits(args: argparse.Namespace) -> PlannedLimits | None:
    """The plan for MODEL on --gpu with the given flags (vLLM's, or SGLang's with --engine
    sglang), when both are named."""
    if not args.model or not (args.gpu or args.gpu_memory_gib):
        return None
    from kvwise.core.catalog import load_model
    from kvwise.core.gpus import resolve_gpu
    from kvwise.planner import plan

    if getattr(args, "engine", "vllm") == "sglang":
        return _plan_sglang_limits(args)

    # a name narrowed (or overridden) by --gpu-memory-gib, as `kvwise plan` reads them
    gpu = resolve_gpu(args.gpu, args.gpu_memory_gib, detect=False)
    result = plan(
        load_model(args.model), gpu, flags_from_args(args), vllm_version=args.vllm_version
    )
    if result.error is not None:  # a verdict kvwise does not model is no refusal
        raise UsageError(f"the plan says vLLM will not start: {result.error.message}")
    summary = (
        f"{result.model.model_id} on {result.gpu.name}: {result.kv.tokens:,} KV tokens, "
        f"max_model_len {result.flags.max_model_len:,}, "
        f"max concurrency {result.kv.max_concurrency:.1f}"
    )
    return PlannedLimits(
        result.kv.tokens, result.flags.max_model_len, summary, result.flags.max_num_seqs
    )


def _plan_sglang_limits(args: argparse.Namespace) -> PlannedLimits:
    from kvwise.core.catalog import load_model
    from kvwise.core.gpus import resolve_gpu
    from kvwise.planner.cli import sglang_flags_from_args
    from kvwise.planner.sglang import launch_args, plan_sglang

    gpu = resolve_gpu(args.gpu, args.gpu_memory_gib, detect=False)
    flags = flags_from_args(args)
    result = plan_sglang(load_model(args.model), gpu, flags, sglang_flags_from_args(args))
    if result.error is not None:
        raise UsageError(f"the plan says SGLang will not start: {result.error}")
    summary = (
        f"{result.model.model_id} on {result.gpu.name}, SGLang {result.family}: "
        f"max_total_num_tokens {result.max_total_num_tokens:,}, context length "
        f"{result.context_length:,}, max_running_requests {result.max_running_requests}"
    )
    return PlannedLimits(
        result.max_total_num_tokens,
        result.context_length,
        summary,
        result.max_running_requests,
        tuple(launch_args(result, flags)),
        result.tp,
    )


def _sglang_server_pool(url: str, ca_file: str | None) -> int | None:
    """SGLang's `max_total_num_tokens` from /server_info (0.5.x) or /get_server_info (older)."""
    for path in ("/server_info", "/get_server_info"):
        try:
            status, body = get_once(f"{url}{path}", ca_file)
            value = json.loads(body).get("max_total_num_tokens") if status == 200 else None
        except (UpstreamConnectionError, ValueError, AttributeError):
            continue
        if isinstance(value, int) and value > 0:
            return value
    return None


def _engine_limits(url: str, ca_file: str | None) -> tuple[int | None, int | None, str]:
    """(pool tokens, max_model_len, where the pool came from) as the engine reports them,
    None where it does not."""
    try:
        _, models_body = get_once(f"{url}/v1/models", ca_file)
        models = json.loads(models_body).get("data") or [{}]
        metrics_status, metrics = get_once(f"{url}/metrics", ca_file)
    except (UpstreamConnectionError, ValueError, AttributeError) as exc:
        raise UpstreamError(f"cannot read limits from {url}: {exc}") from None
    max_model_len = models[0].get("max_model_len")
    load = parse_engine_metrics(metrics.decode()) if metrics_status == 200 else None
    pool, source = (load.pool_tokens if load else None), f"{url}/metrics"
    if pool is None and (load is None or load.engine != "vllm"):
        pool, source = _sglang_server_pool(url, ca_file), f"{url}/server_info"
    return pool, max_model_len if isinstance(max_model_len, int) else None, source


def discover_limits(
    args: argparse.Namespace, planned: PlannedLimits | None, urls: list[str]
) -> Limits:
    budget, budget_source = args.kv_budget_tokens, "--kv-budget-tokens"
    max_len, max_len_source = args.max_model_len, "--max-model-len"
    if planned is not None:
        if budget is None:
            budget, budget_source = planned.kv_tokens, "the plan"
        if max_len is None or max_len == -1:
            max_len, max_len_source = planned.max_model_len, "the plan"
    if urls and (budget is None or max_len is None or max_len == -1):
        ca_file = getattr(args, "upstream_ca", None)
        pool, engine_len, pool_source = _engine_limits(urls[0], ca_file)
        if budget is None and pool is not None:
            budget, budget_source = pool, f"the engine's KV pool ({pool_source})"
        if (max_len is None or max_len == -1) and engine_len is not None:
            max_len, max_len_source = engine_len, f"the engine ({urls[0]}/v1/models)"
    if budget is None:
        raise UsageError(
            "cannot tell the KV budget: pass --kv-budget-tokens, or a MODEL and --gpu to plan"
        )
    if max_len is None or max_len == -1:
        raise UsageError(
            "cannot tell max_model_len: pass --max-model-len, or a MODEL and --gpu to plan"
        )
    max_num_seqs, max_num_seqs_source = _max_num_seqs(args, planned)
    return Limits(
        budget,
        budget_source,
        max_len,
        max_len_source,
        planned.summary if planned else None,
        max_num_seqs,
        max_num_seqs_source,
    )


def _max_num_seqs(
    args: argparse.Namespace, planned: PlannedLimits | None
) -> tuple[int | None, str]:
    """The engine's running cap: --max-num-seqs (given to vLLM too with --launch), else the
    plan's (vLLM's default for the release and GPU), else unknown."""
    if getattr(args, "max_num_seqs", None):
        return args.max_num_seqs, "--max-num-seqs"
    if planned is not None and planned.max_num_seqs:
        return planned.max_num_seqs, "the plan"
    return None, NO_MAX_NUM_SEQS
