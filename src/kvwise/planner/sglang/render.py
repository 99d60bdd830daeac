"""The SGLang plan as JSON, as a launch command, and as text."""

from __future__ import annotations

import json
import shlex
from typing import Any

from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GIB, GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.planner.plan import plan as vllm_plan
from kvwise.planner.sglang.plan import SglangFlags, SglangPlan, plan_sglang
from kvwise.planner.sglang.releases import launch_flags


def sglang_command(result: SglangPlan, flags: VllmFlags, sglang: SglangFlags | None = None) -> str:
    parts = ["python", "-m", "sglang.launch_server", "--model-path", result.model.model_id]
    parts += ["--mem-fraction-static", str(round(result.mem_fraction_static, 3))]
    parts += ["--context-length", str(result.context_length)]
    if result.tp > 1:
        parts += ["--tp", str(result.tp)]
    if flags.kv_cache_dtype and flags.kv_cache_dtype.startswith("fp8"):
        parts += ["--kv-cache-dtype", "fp8_e4m3"]
    running = (sglang.max_running_requests if sglang else None) or flags.max_num_seqs
    if running:
        parts += ["--max-running-requests", str(running)]
    if sglang is not None:
        for flag, value in (
            ("--chunked-prefill-size", sglang.chunked_prefill_size),
            ("--cuda-graph-max-bs", sglang.cuda_graph_max_bs),
        ):
            if value is not None:
                parts += [flag, str(value)]
    return " ".join(shlex.quote(p) for p in parts)


def launch_args(result: SglangPlan, flags: VllmFlags) -> list[str]:
    """Every planned flag, written out (not left to the release's defaults), for `kvwise serve
    --launch` and `kvwise deploy`; `--enable-metrics` so that the gateway can read the load."""
    pairs = [
        ("--mem-fraction-static", str(round(result.mem_fraction_static, 3))),
        ("--context-length", str(result.context_length)),
        ("--max-running-requests", str(result.max_running_requests)),
        ("--chunked-prefill-size", str(result.chunked_prefill_size)),
        ("--cuda-graph-max-bs", str(result.cuda_graph_max_bs)),
    ]
    if result.tp > 1:
        pairs.append(("--tp", str(result.tp)))
    if flags.kv_cache_dtype and flags.kv_cache_dtype.startswith("fp8"):
        pairs.append(("--kv-cache-dtype", "fp8_e4m3"))
    accepted = launch_flags(result.family)  # releases before 0.3.6 lack some of them
    args = [part for pair in pairs if accepted is None or pair[0] in accepted for part in pair]
    return [*args, "--enable-metrics"] if accepted is None else args


def _gib(value: int) -> float:
    return round(value / GIB, 3)


def _outside(result: SglangPlan) -> dict[str, Any] | None:
    """What start-up allocates after the pool, by term, and the fix when it does not fit."""
    need = result.outside
    if need is None:
        return None
    return {
        "left": _gib(result.pre_load_free_bytes - result.static_bytes),
        "needed": _gib(need.at_start),
        "request_table": _gib(need.req_to_token),
        "attention_buffers": _gib(need.attention),
        "cuda_graphs": _gib(need.graphs + need.piecewise),
        "fix": result.fix.flags() if result.fix is not None else None,
    }


def to_json(
    result: SglangPlan,
    flags: VllmFlags,
    vllm_tokens: int | None,
    sglang: SglangFlags | None = None,
) -> dict[str, Any]:
    return {
        "engine": "sglang",
        "sglang_release_family": result.family,
        "model": result.model.model_id,
        "gpu": {
            "name": result.gpu.name,
            "memory_gib": _gib(result.gpu.memory_bytes),
            "count": result.tp,
        },
        "mem_fraction_static": round(result.mem_fraction_static, 3),
        "mem_fraction_static_is_default": result.fraction_is_default,
        # what SGLang sizes the pool with (a multimodal model up to 0.4.8: x0.95 or x0.90)
        "mem_fraction_static_used": round(result.mem_fraction_static * result.multimodal_scale, 3),
        "memory_gib": {
            "total": _gib(result.gpu.memory_bytes),
            "free_before_load": _gib(result.pre_load_free_bytes),
            "static": _gib(result.static_bytes),
            "weights": _gib(result.weights_bytes),
            "kv_cache": _gib(result.kv_bytes),
            "outside_static": _gib(result.gpu.memory_bytes - result.static_bytes),
        },
        "start_up_outside_static_gib": _outside(result),
        "max_total_num_tokens": result.max_total_num_tokens,
        "max_running_requests": result.max_running_requests,
        "chunked_prefill_size": result.chunked_prefill_size,
        "cuda_graph_max_bs": result.cuda_graph_max_bs,
        "context_length": result.context_length,
        "starts": result.starts,
        "error": result.error,
        "warnings": list(result.warnings),
        "not_modelled": list(result.not_modelled),
        "command": sglang_command(result, flags, sglang),
        "vllm_kv_tokens_same_flags": vllm_tokens,
    }


def _print_text(result: SglangPlan, data: dict[str, Any]) -> None:
    from rich.console import Console

    console = Console()
    mem = data["memory_gib"]
    console.print(
        f"[bold]{result.model.model_id}[/] on {result.tp} × {result.gpu.name}, SGLang "
        f"{result.family} (mem_fraction_static {data['mem_fraction_static']})"
    )
    console.print(
        f"static (weights + KV): {mem['static']:.2f} GiB = weights {mem['weights']:.2f} + KV "
        f"{mem['kv_cache']:.2f}; left for activations and graphs: {mem['outside_static']:.2f} GiB"
    )
    console.print(
        f"max_total_num_tokens {result.max_total_num_tokens:,}, max_running_requests "
        f"{result.max_running_requests}, chunked_prefill_size {result.chunked_prefill_size}, "
        f"cuda_graph_max_bs {result.cuda_graph_max_bs}"
    )
    if data["vllm_kv_tokens_same_flags"] is not None:
        console.print(f"vLLM with the same flags: {data['vllm_kv_tokens_same_flags']:,} KV tokens")
    for line in (*result.warnings, *(f"not modelled: {n}" for n in result.not_modelled)):
        console.print(f"[yellow]{line}[/]", markup=True, highlight=False)
    console.print(
        "[bold green]SGLang starts.[/]" if result.starts else f"[bold red]{result.error}[/]"
    )
    console.print(f"\n{data['command']}", markup=False, highlight=False)


def run_sglang(
    model: ModelSpec, gpu: GpuSpec, flags: VllmFlags, *, as_json: bool, sglang: SglangFlags
) -> int:
    result = plan_sglang(model, gpu, flags, sglang)
    vllm_result = vllm_plan(model, gpu, flags)
    data = to_json(result, flags, vllm_result.kv.tokens if vllm_result.starts else None, sglang)
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        _print_text(result, data)
    return 0 if result.starts else 1
