"""Candidate changes for each root cause, valued from the log's figures or by the planner.

Every candidate says why, with numbers. Values from vLLM's own figures (`from_log=True`) are
vLLM's arithmetic redone: its estimate of the longest max_model_len that fits, the free memory
it measured, the size of the allocation that failed. Values from the planner are the smallest
change it predicts will start: the largest max_model_len / max_num_seqs / max_num_batched_tokens,
the smallest gpu_memory_utilization.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from kvwise.doctor import explain, kinds, oom_options, runtime_options
from kvwise.doctor.figures import GIB
from kvwise.doctor.fix import MAX_SAFE_UTILIZATION, FixContext, Option
from kvwise.doctor.levers import (
    LENGTH_STEP,
    MIN_LENGTH,
    ceil2,
    eager,
    floor2,
    gib,
    gpu_total,
    if_safe,
    largest_utilization,
    largest_value,
    logged_util,
    peak_flags,
    smaller_batch,
    smallest_utilization,
)

HEADROOM_UTILIZATION = 0.05  # share of the GPU left for the KV cache above the non-KV memory
DEFAULT_UTILIZATION = 0.9  # vLLM's long-standing default (0.92 lately; the planner knows)


def max_model_len_options(ctx: FixContext) -> list[Option]:
    return [o for o in (_shorter_length(ctx), _more_util_for_kv(ctx), _fp8_kv(ctx)) if o]


def _shorter_length(ctx: FixContext) -> Option | None:
    old = ctx.flags.get("max_model_len")
    estimate = ctx.figure("estimated_max_model_len") or ctx.figure("kv_cache_tokens")
    if estimate is not None and estimate >= MIN_LENGTH:
        new = int(estimate) // LENGTH_STEP * LENGTH_STEP
        source = "vLLM's own estimate" if ctx.figure("estimated_max_model_len") else "the KV cache"
        reason = (
            f"lower --max-model-len to {new:,}: {source} holds {int(estimate):,} tokens, so one "
            f"request of up to {new:,} tokens fits"
        )
        return Option({"max_model_len": new}, reason, {"max_model_len": old}, from_log=True)
    if not isinstance(old, int) or old <= MIN_LENGTH:
        return None
    found = largest_value(ctx, "max_model_len", old, MIN_LENGTH, LENGTH_STEP)
    if found is None:
        return None
    reason = f"lower --max-model-len from {old:,} to {found:,}: the longest the planner fits"
    return Option({"max_model_len": found}, reason, {"max_model_len": old})


def _needed_and_available_kv(ctx: FixContext) -> tuple[float, float] | None:
    """(KV bytes one full-length request needs, KV bytes available), as vLLM logged them."""
    needed, available = ctx.figure("kv_needed_bytes"), ctx.figure("kv_cache_bytes")
    ratio = _shortfall_ratio(ctx)
    if needed is None and available is not None and ratio is not None:
        needed = available * ratio
    return (needed, available) if needed is not None and available is not None else None


def _shortfall_ratio(ctx: FixContext) -> float | None:
    """KV one full-length request needs / KV available (> 1 when it does not fit)."""
    needed, available = ctx.figure("kv_needed_bytes"), ctx.figure("kv_cache_bytes")
    if needed is not None and available:
        return needed / available
    tokens, length = ctx.figure("kv_cache_tokens"), ctx.flags.get("max_model_len")
    if tokens and isinstance(length, int) and length > 0:
        return length / tokens  # the old wording gives the capacity in tokens
    return None


def _more_util_for_kv(ctx: FixContext) -> Option | None:
    util, total, kv = logged_util(ctx), gpu_total(ctx), _needed_and_available_kv(ctx)
    if util is None:
        return None
    if total is not None and kv is not None:
        # the budget grows by (new - old) x total; all of it goes to the KV cache
        new = ceil2(util + (kv[0] - kv[1]) / total + 0.01)
        reason = (
            f"raise --gpu-memory-utilization from {util:g} to {new:g}: +{gib((new - util) * total)}"
            f" for the KV cache, which needs {gib(kv[0])} for one full-length request"
        )
        return if_safe(
            ctx,
            new,
            Option(
                {"gpu_memory_utilization": new},
                reason,
                {"gpu_memory_utilization": util},
                from_log=True,
            ),
        )
    found = smallest_utilization(ctx, util)
    if found is None:
        return None
    reason = f"raise --gpu-memory-utilization from {util:g} to {found:g}: the planner's smallest"
    return Option({"gpu_memory_utilization": found}, reason, {"gpu_memory_utilization": util})


def _fp8_kv(ctx: FixContext) -> Option | None:
    dtype = ctx.flags.get("kv_cache_dtype", "auto")
    if dtype not in ("auto", "bfloat16", "float16"):
        return None
    ratio = _shortfall_ratio(ctx)
    if ratio is not None and ratio > 2:
        return None  # even at one byte per element one request does not fit
    reason = "--kv-cache-dtype fp8 stores one byte per element instead of two: twice the tokens"
    return Option({"kv_cache_dtype": "fp8"}, reason, {"kv_cache_dtype": dtype}, ratio is not None)


_MAMBA_BLOCKS = re.compile(
    r"max_num_seqs \((?P<seqs>\d+)\) exceeds available Mamba cache blocks \((?P<blocks>\d+)\)"
)


def _seqs_within_mamba_blocks(ctx: FixContext) -> Option | None:
    """A hybrid model's state blocks below max_num_seqs: vLLM's own message names the most
    sequences its blocks hold (one Mamba state block per decoding sequence)."""
    for line in ctx.diagnosis.evidence:
        match = _MAMBA_BLOCKS.search(line.message)
        if match is not None:
            blocks, seqs = int(match["blocks"]), int(match["seqs"])
            reason = (
                f"lower --max-num-seqs from {seqs} to {blocks}: vLLM found {blocks} Mamba cache "
                "blocks and every decoding sequence needs one"
            )
            return Option({"max_num_seqs": blocks}, reason, {"max_num_seqs": seqs}, from_log=True)
    return None


def no_kv_memory_options(ctx: FixContext) -> list[Option]:
    options = [_seqs_within_mamba_blocks(ctx), _util_above_non_kv(ctx), _back_to_default_util(ctx)]
    util = logged_util(ctx)
    if util is not None:
        found = smallest_utilization(ctx, util)
        if found is not None:
            reason = (
                f"raise --gpu-memory-utilization from {util:g} to {found:g}: the planner's smallest"
            )
            options.append(
                Option({"gpu_memory_utilization": found}, reason, {"gpu_memory_utilization": util})
            )
    options += smaller_batch(ctx, peak_flags(ctx))
    if ctx.reproduces or ctx.figure("cuda_graph_estimate_bytes") is not None:
        options.append(eager(ctx))  # helps only where graph memory is inside the budget
    return [o for o in options if o]


def _back_to_default_util(ctx: FixContext) -> Option | None:
    util = ctx.flags.get("gpu_memory_utilization")
    if not isinstance(util, float) or util >= DEFAULT_UTILIZATION:
        return None
    reason = (
        f"raise --gpu-memory-utilization from {util:g} back to vLLM's default "
        f"{DEFAULT_UTILIZATION:g}: it caps the whole instance (weights, activations, graphs and "
        "KV cache), so a low value leaves nothing for the KV cache"
    )
    return Option(
        {"gpu_memory_utilization": DEFAULT_UTILIZATION}, reason, {"gpu_memory_utilization": util}
    )


def _util_above_non_kv(ctx: FixContext) -> Option | None:
    util, total = logged_util(ctx), gpu_total(ctx)
    budget, kv = ctx.figure("budget_bytes"), ctx.figure("kv_cache_bytes")
    if None in (util, total, budget, kv) or kv > 0:  # type: ignore[operator]
        return None
    assert util is not None and total is not None and budget is not None and kv is not None
    non_kv = budget - kv  # weights + activation peak + non-torch, as vLLM measured them
    new = ceil2(non_kv / total + HEADROOM_UTILIZATION)
    reason = (
        f"raise --gpu-memory-utilization from {util:g} to {new:g}: the non-KV memory alone is "
        f"{gib(non_kv)} ({non_kv / total:.2f} of the GPU); this leaves about "
        f"{gib(new * total - non_kv)} for the KV cache"
    )
    return if_safe(
        ctx,
        new,
        Option(
            {"gpu_memory_utilization": new}, reason, {"gpu_memory_utilization": util}, from_log=True
        ),
    )


def free_memory_options(ctx: FixContext) -> list[Option]:
    """A budget that fits beside what else holds the GPU, re-planned with that memory taken.

    vLLM checks the budget (utilization x total) against the free memory; what it puts outside
    the budget (CUDA graphs, the sampler warm-up) must fit in what is left. So the largest
    utilization up to 1% below the free share (and below the logged one) that the planner says
    starts, with the free memory set; if none starts alone, the same with the longest
    max_model_len that fits.
    """
    free, total, util = _free_for_vllm(ctx), gpu_total(ctx), logged_util(ctx)
    if free is None and util is not None:
        # nothing else known on the card: the planner's own view of the free memory
        found = largest_utilization(ctx, util)
        reason = f"{_util_words(util, found or util)}: the planner's largest that starts"
        return [] if found is None else [Option({"gpu_memory_utilization": found}, reason)]
    if free is None or total is None:
        return []
    ceiling = floor2(free / total - 0.01)  # 1% below what was free, for what moves meanwhile
    if util is not None:
        ceiling = min(ceiling, round(util - 0.01, 2))  # a lower budget than the one that failed
    why = f"{gib(free)} of {gib(total)} was free at start-up"
    if ctx.figure("free_at_startup_bytes") is None:
        why = f"other processes hold {gib(total - free)}, leaving {gib(free)} of {gib(total)}"
    if not ctx.can_plan:
        reason = f"{_util_words(util, ceiling)}: {why}"
        previous = {"gpu_memory_utilization": util}
        return [Option({"gpu_memory_utilization": ceiling}, reason, previous, from_log=True)]
    return _fits_beside(ctx, ceiling, why)


def _fits_beside(ctx: FixContext, ceiling: float, why: str) -> list[Option]:
    """The planner's largest utilization at or below `ceiling` that starts (alone, else with
    the longest max_model_len that fits the smaller KV cache)."""
    util = logged_util(ctx)
    previous = {"gpu_memory_utilization": util, "max_model_len": ctx.resolved("max_model_len")}
    floor = max(0.3, ceiling - MAX_UTIL_STEPS / 100)
    candidates = [round(ceiling - step / 100, 2) for step in range(MAX_UTIL_STEPS + 1)]
    candidates = [u for u in candidates if u >= floor]
    for new in candidates:
        if ctx.starts({"gpu_memory_utilization": new}):
            reason = f"{_util_words(util, new)}: {why}, and the planner says it starts"
            return [Option({"gpu_memory_utilization": new}, reason, previous)]
    for new in candidates:
        length = _length_at(ctx, {"gpu_memory_utilization": new})
        if length is not None:
            changes = {"gpu_memory_utilization": new, "max_model_len": length}
            reason = (
                f"{_util_words(util, new)}: {why}; with --max-model-len {length:,} to fit the "
                "smaller KV cache"
            )
            return [Option(changes, reason, previous)]
    return []


MAX_UTIL_STEPS = 15  # how far below the free share the search goes, in 0.01 steps


def _util_words(util: float | None, new: float) -> str:
    was = "" if util is None else f" from {util:g}"
    return f"lower --gpu-memory-utilization{was} to {new:g}"


def _free_for_vllm(ctx: FixContext) -> float | None:
    """What vLLM found free: its own line, else the total less what other processes hold
    (nvidia-smi, or the processes PyTorch's OOM message names), set on the GPU by `resolve`."""
    free = ctx.figure("free_at_startup_bytes")
    if free is None and ctx.gpu is not None:
        free = ctx.gpu.free_bytes
    return free


def _length_at(ctx: FixContext, changes: dict[str, Any]) -> int | None:
    old = ctx.resolved("max_model_len")
    if not isinstance(old, int) or old <= MIN_LENGTH:
        return None
    return largest_value(ctx.with_changes(changes), "max_model_len", old, MIN_LENGTH, LENGTH_STEP)


def weights_options(ctx: FixContext) -> list[Option]:
    options = []
    tp = int(ctx.flags.get("tensor_parallel_size") or 1)
    reason = (
        f"--tensor-parallel-size {tp * 2}: each GPU holds half the weights (needs {tp * 2} GPUs)"
    )
    options.append(Option({"tensor_parallel_size": tp * 2}, reason, {"tensor_parallel_size": tp}))
    before = ctx.plan()
    if before is not None and before.memory.weights_bytes > before.memory.budget_bytes:
        excess = before.memory.weights_bytes - before.memory.budget_bytes
        gb = math.ceil(excess / GIB) + 2
        reason = f"--cpu-offload-gb {gb}: keeps {gb} GiB of weights in host RAM (much slower)"
        options.append(Option({"cpu_offload_gb": gb}, reason, {"cpu_offload_gb": 0}))
    return options


def another_process_options(ctx: FixContext) -> list[Option]:
    return free_memory_options(ctx) or oom_options.allocation_options(ctx)


def host_ram_options(ctx: FixContext) -> list[Option]:
    swap = ctx.flags.get("swap_space")
    is_v0 = ctx.parsed.engine == "V0" or (ctx.parsed.engine is None and swap is not None)
    if is_v0 and swap != 0:  # V1 has no swap space
        reason = "--swap-space 0: V0 pins swap_space GiB of host RAM per GPU (4 by default)"
        previous = {"swap_space": swap if swap is not None else 4}
        # host RAM, which the planner's GPU verdict does not cover: kept without a re-plan
        return [Option({"swap_space": 0}, reason, previous, from_log=True)]
    return []


def preemption_options(ctx: FixContext) -> list[Option]:
    options = [_larger_pool(ctx), _fp8_kv(ctx)]
    running = explain.running_at_full_kv(ctx.parsed)
    if running is not None and running > 1:
        reason = (
            f"--max-num-seqs {running - 1}: {running} running requests filled the KV cache; "
            "fewer at once queue instead of being preempted"
        )
        previous = {"max_num_seqs": ctx.resolved("max_num_seqs")}
        # the running count is vLLM's own stats line
        options.append(Option({"max_num_seqs": running - 1}, reason, previous, from_log=True))
    return [o for o in options if o]


def _larger_pool(ctx: FixContext) -> Option | None:
    """The highest gpu_memory_utilization that still starts (the planner's), for more KV."""
    util = logged_util(ctx)
    if util is None or util >= MAX_SAFE_UTILIZATION:
        return None
    new = round(min(MAX_SAFE_UTILIZATION, util + 0.05), 2)  # without a planner: a modest step
    if ctx.can_plan:
        steps = round((MAX_SAFE_UTILIZATION - util) * 100)
        candidates = [round(MAX_SAFE_UTILIZATION - step / 100, 2) for step in range(steps)]
        new = next((u for u in candidates if ctx.starts({"gpu_memory_utilization": u})), util)
        if new <= util:
            return None
    reason = f"raise --gpu-memory-utilization from {util:g} to {new:g}: a larger KV pool"
    return Option({"gpu_memory_utilization": new}, reason, {"gpu_memory_utilization": util})


PRESCRIBERS: dict[str, Callable[[FixContext], list[Option]]] = {
    kinds.MAX_MODEL_LEN_EXCEEDS_KV_CACHE: max_model_len_options,
    kinds.NO_KV_CACHE_MEMORY: no_kv_memory_options,
    kinds.INSUFFICIENT_FREE_MEMORY: free_memory_options,
    kinds.CUDA_OOM_SAMPLER_WARMUP: oom_options.sampler_options,
    kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE: oom_options.capture_options,
    kinds.CUDA_OOM_PROFILE_RUN: oom_options.profile_run_options,
    kinds.CUDA_OOM_KV_CACHE_ALLOCATION: oom_options.allocation_options,
    kinds.CUDA_OOM_RUNTIME: oom_options.runtime_options,
    kinds.WEIGHTS_EXCEED_MEMORY: weights_options,
    kinds.ANOTHER_PROCESS: another_process_options,
    kinds.HOST_RAM: host_ram_options,
    kinds.PREEMPTION: preemption_options,
    kinds.CUDA_OOM: oom_options.unlocalised_oom_options,
    kinds.CONTEXT_LENGTH: runtime_options.context_length_options,
    kinds.ENGINE_DEAD: oom_options.unlocalised_oom_options,  # advice only: the cause is above
    # advice only: KV pressure behind timeouts shows as preemption, which is classified first
    kinds.REQUEST_TIMEOUT: oom_options.unlocalised_oom_options,
}


def options_for(ctx: FixContext, kind: str) -> list[Option]:
    prescriber = PRESCRIBERS.get(kind)
    return [] if prescriber is None else prescriber(ctx)
