"""`plan()`: vLLM's start-up decisions for one model, GPU and set of flags.

Order follows vLLM's own start-up: free-memory check against the budget, weights, profile run,
KV pool sizing and the one-request fit check, then CUDA-graph capture and the sampler warm-up
outside the profiled budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.planner import errors_text, memory
from kvwise.planner.defaults import VersionRules, engine_rules, resolve_flags, rules_for
from kvwise.planner.hostram import host_ram_bytes
from kvwise.planner.kv import (
    KvLayout,
    blocks_per_request,
    cdiv,
    estimated_max_model_len,
    kv_dtype_bytes,
    kv_layout,
    kv_tokens,
)
from kvwise.planner.kv_release import for_release
from kvwise.planner.result import (
    CUDA_OOM_SAMPLER_WARMUP,
    KvCapacity,
    MemoryBreakdown,
    Plan,
    PlanError,
    ResolvedFlags,
)
from kvwise.planner.warnings import collect_warnings

# Modules for some models or flags only (vision towers, mamba state, LoRA) are imported where
# such a plan needs them: `kvwise plan` of a dense text model does not load them.


@dataclass(frozen=True)
class _NonKv:
    weights: int
    activation: int
    non_torch: int
    graphs_actual: int
    graphs_in_budget: int  # the estimate deducted from the budget (0 when outside)


def _non_kv(
    model: ModelSpec, gpu: GpuSpec, flags: VllmFlags, resolved: ResolvedFlags, rules: VersionRules
) -> _NonKv:
    graphs = memory.cuda_graph_bytes(model, resolved, rules)
    in_budget = memory.graph_estimate_in_budget(model, rules)
    in_budget_bytes = int(graphs * memory.GRAPH_ESTIMATE_FRACTION) if in_budget else 0
    return _NonKv(
        # LoRA slots are allocated inside load_model: vLLM logs them as weights
        weights=memory.weights_bytes(model, resolved, rules)
        + _lora_bytes(model, flags, resolved, rules),
        activation=memory.activation_bytes(model, gpu, resolved, rules),
        non_torch=memory.non_torch_bytes(model, gpu, resolved, rules),
        graphs_actual=graphs,
        graphs_in_budget=in_budget_bytes,
    )


def _lora_bytes(
    model: ModelSpec, flags: VllmFlags, resolved: ResolvedFlags, rules: VersionRules
) -> int:
    if not flags.enable_lora:
        return 0  # no LoRA slots (planner/lora.py says the same)
    from kvwise.planner.lora import lora_bytes

    return lora_bytes(model, flags, resolved, rules)


def _free_at_init(gpu: GpuSpec, startup_free_bytes: int | None, before_snapshot: int) -> int:
    """Free memory in vLLM's start-up snapshot (MemorySnapshot / init_gpu_memory), taken after
    its own CUDA context exists (and, 0.11+, after the distributed set-up: `before_snapshot`).
    A figure vLLM printed itself ("Free memory on device (X/Y GiB) on startup") already excludes
    both; NVML's free figure, read before vLLM runs, and an empty card do not."""
    if startup_free_bytes is not None:
        return startup_free_bytes
    free = gpu.free_bytes if gpu.free_bytes is not None else gpu.memory_bytes
    return free - memory.CUDA_CONTEXT_BYTES - before_snapshot


def _mamba_pages(model: ModelSpec, resolved: ResolvedFlags, rules: VersionRules) -> int:
    if model.mamba is None:
        return 1
    from kvwise.planner.kv_mamba import STATE_PAGES_PER_REQUEST, mamba_cache_mode

    mode = mamba_cache_mode(model, resolved.enable_prefix_caching, rules.mamba_prefix_cache_mode)
    return STATE_PAGES_PER_REQUEST[mode]


def _available_kv(budget: int, parts: _NonKv, resolved: ResolvedFlags) -> int:
    if resolved.kv_cache_memory_bytes is not None:
        return resolved.kv_cache_memory_bytes  # profiling is skipped; the user's size is used
    return budget - parts.weights - parts.activation - parts.non_torch - parts.graphs_in_budget


def _resolve_auto_len(resolved: ResolvedFlags, layout: KvLayout, available: int) -> ResolvedFlags:
    if resolved.max_model_len != -1:
        return resolved
    # --max-model-len auto: the longest length whose one request fits, less the null block
    fitted = estimated_max_model_len(
        layout, available - layout.bytes_per_block, resolved.max_num_batched_tokens
    )
    return ResolvedFlags(**{**resolved.__dict__, "max_model_len": max(fitted, 0)})


def _blocks_per_request(layout: KvLayout, resolved: ResolvedFlags, rules: VersionRules) -> int:
    if rules.engine == "V0":
        # V0 sizes both its fit check (worker.py:raise_if_cache_size_invalid) and its concurrency
        # (executor: num_gpu_blocks x block_size / max_model_len) on max_model_len, window or not
        return cdiv(resolved.max_model_len, layout.block_size)
    return blocks_per_request(layout, resolved.max_model_len, resolved.max_num_batched_tokens)


def _capacity(
    layout: KvLayout, available: int, resolved: ResolvedFlags, rules: VersionRules
) -> KvCapacity:
    num_blocks = max(available, 0) // layout.bytes_per_block
    if resolved.num_gpu_blocks_override is not None:
        num_blocks = resolved.num_gpu_blocks_override
    per_request = _blocks_per_request(layout, resolved, rules)
    tokens = kv_tokens(
        layout, num_blocks, resolved.max_model_len, per_request, rules.tokens_formula
    )
    return KvCapacity(
        bytes_per_token=layout.bytes_per_token,
        block_size=layout.block_size,
        bytes_per_block=layout.bytes_per_block,
        num_gpu_blocks=num_blocks,
        tokens=tokens,
        max_concurrency=num_blocks / per_request if per_request else 0.0,
        blocks_per_request=per_request,
    )


def _room_outside_budget(
    gpu: GpuSpec,
    resolved: ResolvedFlags,
    rules: VersionRules,
    budget: int,
    parts: _NonKv,
    available: int,
    free: int,
) -> int:
    """Device memory left beside the budget once the KV pool is allocated."""
    if resolved.kv_cache_memory_bytes is not None:
        return free - (parts.weights + parts.activation + parts.non_torch + available)
    if rules.accounting == "global":
        # Global accounting (V0 0.6.4 worker/worker.py:determine_num_available_blocks, V1
        # 0.8.0-0.9.0 v1/worker/gpu_worker.py:determine_available_memory): the budget is
        # total x util less the torch peak and everything else in use on the device
        # (mem_get_info's total - free: the CUDA context, NCCL, other processes), so the
        # context and other processes sit inside the budget and what is left beside it is
        # total - budget, not free - budget. Memory in use at the snapshot that the plan did
        # not charge (a start-up free figure below NVML's) still takes from that room.
        charged = gpu.memory_bytes - gpu.free_bytes if gpu.free_bytes is not None else 0
        in_use = gpu.memory_bytes - free - memory.CUDA_CONTEXT_BYTES
        return gpu.memory_bytes - budget - max(0, in_use - charged)
    return free - budget


def _startup_error(
    gpu: GpuSpec,
    resolved: ResolvedFlags,
    rules: VersionRules,
    budget: int,
    parts: _NonKv,
    available: int,
    layout: KvLayout,
    kv: KvCapacity,
    model: ModelSpec,
    free: int,
) -> PlanError | None:
    # V1 0.9.1+ (gpu_worker.py:init_device, later v1/worker/utils.py:request_memory): the
    # snapshot's free memory < ceil(total x util) is refused before the model loads
    if rules.startup_free_check and free < budget:
        return errors_text.insufficient_free(gpu, free, budget, resolved)
    if parts.weights > free:
        return errors_text.weights_exceed(parts.weights, free, resolved)
    if parts.weights + parts.activation > free:
        return errors_text.profile_run_oom(parts.weights, parts.activation, free)
    if available - layout.bytes_per_block <= 0 or kv.num_gpu_blocks <= 1:
        return errors_text.no_kv_cache(rules)
    needed = kv.blocks_per_request * layout.bytes_per_block
    usable = available - layout.bytes_per_block if rules.null_block_in_check else available
    if needed > usable:
        est = estimated_max_model_len(layout, available, resolved.max_num_batched_tokens)
        return errors_text.max_len_exceeds(rules, resolved, needed, available, kv, est)
    # After the KV pool: graphs (beyond what the budget reserved) and the sampler warm-up must
    # fit in what the budget left free on the device.
    outside = _room_outside_budget(gpu, resolved, rules, budget, parts, available, free)
    if outside < 0:
        # no start-up check (V0, V1 < 0.9.1): the pool is sized past free memory and its
        # allocation fails
        return errors_text.kv_allocation_oom(budget, free)
    graph_excess = parts.graphs_actual - parts.graphs_in_budget
    if graph_excess > outside:
        return errors_text.graph_capture_oom(graph_excess, outside)
    warmup = memory.warmup_bytes(model, gpu, resolved, rules, kv.num_gpu_blocks)
    room = outside - graph_excess
    if memory.uses_v2_runner(model, rules):
        # Model Runner V2: the whole warm-up transient against the device's free memory after
        # the pool, which includes the profile's released transient peak (memory.py)
        room += memory.released_profile_peak_bytes(model, gpu, resolved, rules)
    if rules.engine == "V1" and warmup > room:
        return errors_text.sampler_warmup_oom(resolved)
    return None


def plan(
    model: ModelSpec,
    gpu: GpuSpec,
    flags: VllmFlags,
    *,
    vllm_version: str | None = None,
    num_gpus: int | None = None,
    host_ram_available_bytes: int | None = None,
    startup_free_bytes: int | None = None,
    vllm_use_v1: bool | None = None,
    flashinfer_sampler: bool | None = None,
) -> Plan:
    """Predict what vLLM logs and decides at start-up (all memory figures per GPU).

    `startup_free_bytes`: the free memory vLLM itself reported at start-up (its snapshot, the
    CUDA context already taken), when known; otherwise `gpu.free_bytes` (NVML, before vLLM)
    less the context, or the whole card less the context. `vllm_use_v1`: the VLLM_USE_V1
    environment variable as set (None: unset), which picks the engine on 0.8.0-0.10.1.
    `flashinfer_sampler`: whether the V1 runner samples top-k/top-p with FlashInfer (None: the
    release's default, docs/vllm_rules.md; True: `VLLM_USE_FLASHINFER_SAMPLER=1` from 0.11.1, an
    install with FlashInfer before; False: `VLLM_USE_FLASHINFER_SAMPLER=0`, or a pip install
    without the [flashinfer] extra on 0.8.0-0.11.0).
    """
    rules = engine_rules(rules_for(vllm_version), gpu, flags, vllm_use_v1)
    if flashinfer_sampler is not None and rules.engine == "V1":
        rules = replace(rules, v1_flashinfer_sampler=flashinfer_sampler)
    model = for_release(model, rules.version, rules.engine)
    resolved = resolve_flags(model, gpu, flags, rules)
    if model.vision is not None:
        from kvwise.planner.vision_profile import tower_loaded

        if not tower_loaded(model, resolved, rules):  # every --limit-mm-per-prompt 0 (0.10.1+)
            model = replace(model, vision=None)
    parts = _non_kv(model, gpu, flags, resolved, rules)
    budget = math.ceil(gpu.memory_bytes * resolved.gpu_memory_utilization)
    dtype_bytes = kv_dtype_bytes(resolved.kv_cache_dtype, resolved.dtype)
    layout = kv_layout(
        model,
        tp=resolved.tensor_parallel_size,
        pp=resolved.pipeline_parallel_size,
        block_size=resolved.block_size,
        dtype_bytes=dtype_bytes,
        is_hybrid_manager=rules.hybrid_kv_groups,  # V0 and V1 < 0.9.1: every layer full length
        mamba_pages_per_request=_mamba_pages(model, resolved, rules),
    )
    available = _available_kv(budget, parts, resolved)
    resolved = _resolve_auto_len(resolved, layout, available)
    kv = _capacity(layout, available, resolved, rules)
    before_snapshot = memory.before_snapshot_bytes(gpu, resolved, rules)
    free = _free_at_init(gpu, startup_free_bytes, before_snapshot)
    error = _startup_error(gpu, resolved, rules, budget, parts, available, layout, kv, model, free)
    verdict_not_modelled = None
    if error is None or error.kind == CUDA_OOM_SAMPLER_WARMUP:
        # graph capture runs before the warm-up: its verdict decides which stage fails first
        room = _room_outside_budget(gpu, resolved, rules, budget, parts, available, free)
        excess = parts.graphs_actual - parts.graphs_in_budget
        verdict_not_modelled = memory.nccl_graph_capture_not_modelled(gpu, resolved, excess, room)
    gpus_used = resolved.tensor_parallel_size * resolved.pipeline_parallel_size
    host = host_ram_bytes(model, resolved, gpus_used, parts.weights)
    if error is None and host_ram_available_bytes is not None and host > host_ram_available_bytes:
        error = errors_text.host_ram(host, host_ram_available_bytes)
    breakdown = MemoryBreakdown(
        total_bytes=gpu.memory_bytes,
        budget_bytes=budget,
        weights_bytes=parts.weights,
        activation_peak_bytes=parts.activation,
        non_torch_bytes=parts.non_torch,
        cuda_graph_bytes=parts.graphs_actual,
        kv_cache_bytes=max(available, 0),
        cuda_graph_in_budget=memory.graph_estimate_in_budget(model, rules),
        peak_device_bytes=(0 if rules.accounting == "global" else memory.CUDA_CONTEXT_BYTES)
        + before_snapshot
        + budget
        + parts.graphs_actual
        - parts.graphs_in_budget,
    )
    result = Plan(
        model=model,
        gpu=gpu,
        num_gpus=num_gpus or gpus_used,
        vllm_version=rules.version,
        engine=rules.engine,
        flags=resolved,
        memory=breakdown,
        kv=kv,
        error=error,
        host_ram_bytes=host,
        warnings=(),
        setup_not_modelled=memory.setup_not_modelled(gpu, resolved, rules),
        verdict_not_modelled=verdict_not_modelled,
        vllm_use_v1=vllm_use_v1,
        flashinfer_sampler=flashinfer_sampler,
    )
    return Plan(**{**result.__dict__, "warnings": collect_warnings(result, rules)})
