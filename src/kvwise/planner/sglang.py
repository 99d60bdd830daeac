"""`kvwise plan --engine sglang`: SGLang 0.5's pool sizing, next to vLLM's for the same card.

SGLang sizes weights + KV pool as `mem_fraction_static` of the memory free before loading
(shared/reference/vllm_memory.md section 7); everything else (activations, CUDA graphs) must fit
in the rest. Its default fraction depends on the card's capacity and the chunked-prefill size.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GIB, GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.planner import memory
from kvwise.planner.defaults import resolve_flags, rules_for
from kvwise.planner.kv import kv_dtype_bytes
from kvwise.planner.plan import plan as vllm_plan

MIB = 2**20
# (capacity below GiB, chunked_prefill_size, cuda-graph max batch size at tp < 4, at tp >= 4)
CAPACITY_TIERS = (
    (20, 2048, 8, 8),
    (35, 4096, 48, 160),
    (60, 4096, 32, 160),
    (90, 8192, 256, 512),
    (160, 8192, 256, 512),
    (float("inf"), 16384, 512, 512),
)
PREFILL_GRAPH_RESERVE_MIB = 16 * 8  # prefill breakable graphs: len(prefill_bs) x 8 MiB (~16 sizes)
LARGE_CARD_MIN_RESERVE_MIB = 10240  # cards over 60 GiB reserve at least 10 GiB


@dataclass(frozen=True)
class SglangPlan:
    model: ModelSpec
    gpu: GpuSpec
    tp: int
    mem_fraction_static: float
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    context_length: int
    weights_bytes: int
    static_bytes: int  # mem_fraction_static x free memory before loading
    kv_bytes: int
    max_total_num_tokens: int
    max_running_requests: int
    error: str | None

    @property
    def starts(self) -> bool:
        return self.error is None


def _tier(gpu: GpuSpec, tp: int) -> tuple[int, int]:
    capacity_gib = gpu.memory_bytes / GIB
    for limit, chunk, small_bs, large_bs in CAPACITY_TIERS:
        if capacity_gib < limit:
            return chunk, large_bs if tp >= 4 else small_bs
    raise AssertionError("the last tier has no upper limit")


def default_mem_fraction_static(gpu: GpuSpec, tp: int, pp: int = 1) -> float:
    chunk, max_bs = _tier(gpu, tp)
    capacity_mib = gpu.memory_bytes / MIB
    # server_args: 512 MiB + 1.5 x the chunk + communication buffers + decode and prefill graphs
    reserved = (
        512 + max(chunk, 2048) * 1.5 + tp * pp / 8 * 1024 + max_bs * 2 + PREFILL_GRAPH_RESERVE_MIB
    )
    if capacity_mib > 60 * 1024:
        reserved = max(reserved, LARGE_CARD_MIN_RESERVE_MIB)
    return round((capacity_mib - reserved) / capacity_mib, 3)


def plan_sglang(
    model: ModelSpec, gpu: GpuSpec, flags: VllmFlags, mem_fraction_static: float | None = None
) -> SglangPlan:
    resolved = resolve_flags(model, gpu, flags, rules_for(None))
    tp = resolved.tensor_parallel_size
    chunk, max_bs = _tier(gpu, tp)
    fraction = mem_fraction_static or default_mem_fraction_static(gpu, tp)
    weights = memory.weights_bytes(model, resolved)
    pre_load_free = (gpu.free_bytes or gpu.memory_bytes) - memory.CUDA_CONTEXT_BYTES
    static = int(fraction * pre_load_free)
    kv_bytes = static - weights
    # cell: K and V of every layer for this rank's KV heads
    heads = max(1, model.num_kv_heads // tp)
    cell = (
        heads
        * 2
        * model.head_dim
        * model.num_layers
        * kv_dtype_bytes(resolved.kv_cache_dtype, resolved.dtype)
    )
    tokens = max(kv_bytes, 0) // cell
    context = (
        resolved.max_model_len if resolved.max_model_len > 0 else model.max_position_embeddings
    )
    running = min(max(min(int(tokens / context * 512), 4096), 2048), tokens // 2)
    error = None
    if kv_bytes <= 0:
        error = (
            f"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={fraction}. "
            f"Raise --mem-fraction-static above {weights / pre_load_free:.3f}."
        )
    elif tokens < context:
        error = (
            f"the KV pool holds {tokens:,} tokens, fewer than one request of --context-length {context}; "
            "SGLang starts but cannot serve a full-length request"
        )
    return SglangPlan(
        model,
        gpu,
        tp,
        fraction,
        chunk,
        max_bs,
        context,
        weights,
        static,
        max(kv_bytes, 0),
        tokens,
        running,
        error,
    )


def sglang_command(result: SglangPlan, flags: VllmFlags) -> str:
    parts = ["python", "-m", "sglang.launch_server", "--model-path", result.model.model_id]
    parts += ["--mem-fraction-static", str(result.mem_fraction_static)]
    parts += ["--context-length", str(result.context_length)]
    if result.tp > 1:
        parts += ["--tp", str(result.tp)]
    if flags.kv_cache_dtype and flags.kv_cache_dtype.startswith("fp8"):
        parts += ["--kv-cache-dtype", "fp8_e4m3"]
    if flags.max_num_seqs:
        parts += ["--max-running-requests", str(flags.max_num_seqs)]
    return " ".join(shlex.quote(p) for p in parts)


def to_json(result: SglangPlan, flags: VllmFlags, vllm_tokens: int | None) -> dict[str, Any]:
    def gib(value: int) -> float:
        return round(value / GIB, 3)

    return {
        "engine": "sglang",
        "model": result.model.model_id,
        "gpu": {
            "name": result.gpu.name,
            "memory_gib": gib(result.gpu.memory_bytes),
            "count": result.tp,
        },
        "mem_fraction_static": result.mem_fraction_static,
        "memory_gib": {
            "total": gib(result.gpu.memory_bytes),
            "static": gib(result.static_bytes),
            "weights": gib(result.weights_bytes),
            "kv_cache": gib(result.kv_bytes),
            "outside_static": gib(result.gpu.memory_bytes - result.static_bytes),
        },
        "max_total_num_tokens": result.max_total_num_tokens,
        "max_running_requests": result.max_running_requests,
        "chunked_prefill_size": result.chunked_prefill_size,
        "cuda_graph_max_bs": result.cuda_graph_max_bs,
        "context_length": result.context_length,
        "starts": result.starts,
        "error": result.error,
        "command": sglang_command(result, flags),
        "vllm_kv_tokens_same_flags": vllm_tokens,
    }


def run_sglang(
    model: ModelSpec,
    gpu: GpuSpec,
    flags: VllmFlags,
    *,
    as_json: bool,
    mem_fraction_static: float | None = None,
) -> int:
    result = plan_sglang(model, gpu, flags, mem_fraction_static)
    vllm_result = vllm_plan(model, gpu, flags)
    data = to_json(result, flags, vllm_result.kv.tokens if vllm_result.starts else None)
    if as_json:
        print(json.dumps(data, indent=2))
        return 0 if result.starts else 1
    from rich.console import Console

    console = Console()
    mem = data["memory_gib"]
    console.print(
        f"[bold]{model.model_id}[/] on {result.tp} × {gpu.name}, SGLang (mem_fraction_static "
        f"{result.mem_fraction_static})"
    )
    console.print(
        f"static (weights + KV): {mem['static']:.2f} GiB = weights {mem['weights']:.2f} + KV "
        f"{mem['kv_cache']:.2f}; left for activations and graphs: {mem['outside_static']:.2f} GiB"
    )
    console.print(
        f"max_total_num_tokens {result.max_total_num_tokens:,}, max_running_requests "
        f"{result.max_running_requests}, chunked_prefill_size {result.chunked_prefill_size}"
    )
    if data["vllm_kv_tokens_same_flags"] is not None:
        console.print(f"vLLM with the same flags: {data['vllm_kv_tokens_same_flags']:,} KV tokens")
    console.print(
        "[bold green]SGLang starts.[/]" if result.starts else f"[bold red]{result.error}[/]"
    )
    console.print(f"\n{data['command']}", markup=False, highlight=False)
    return 0 if result.starts else 1
