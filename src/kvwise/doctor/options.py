"""Candidate changes for each root cause, valued from the log's figures or by the planner.

Every candidate says why, with numbers. Values from vLLM's own figures (`from_log=True`) are
vLLM's arithmetic redone: its estimate of the longest max_model_len that fits, the free memory
it measured, the size of the allocation that failed. Values from the planner are the smallest
change it predicts will start: the largest max_model_len / max_num_seqs / max_num_batched_tokens,
the smallest gpu_memory_utilization.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kvwise.doctor import explain, kinds
from kvwise.doctor.figures import GIB
from kvwise.doctor.fix import MAX_SAFE_UTILIZATION, FixContext, Option

LENGTH_STEP = 256  # lengths are rounded down to whole blocks (block sizes divide 256)
MIN_LENGTH = 256
HEADROOM_UTILIZATION = 0.05  # share of the GPU left for the KV cache above the non-KV memory
DEFAULT_UTILIZATION = 0.9  # vLLM's long-standing default (0.92 lately; the planner knows)


def _floor2(value: float) -> float:
    return math.floor(value * 100 + 1e-9) / 100


def _ceil2(value: float) -> float:
    return math.ceil(value * 100 - 1e-9) / 100


def _gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def _total(ctx: FixContext) -> float | None:
    total = ctx.figure("total_bytes")
    return total if total is not None else (ctx.gpu.memory_bytes if ctx.gpu else None)


def _util(ctx: FixContext) -> float | None:
    value = ctx.resolved("gpu_memory_utilization")
    return None if value is None else float(value)


# --- planner searches -----------------------------------------------------------------------


def smallest_utilization(ctx: FixContext, above: float) -> float | None:
    """The smallest gpu_memory_utilization above `above` the planner says starts (0.01 steps)."""
    if not ctx.reproduces:
        return None
    steps = round((MAX_SAFE_UTILIZATION - above) * 100)
    for step in range(1, steps + 1):
        util = round(above + step / 100, 2)
        if ctx.starts({"gpu_memory_utilization": util}):
            return util
    return None


def largest_utilization(ctx: FixContext, below: float, floor: float = 0.5) -> float | None:
    """The largest gpu_memory_utilization below `below` the planner says starts (0.01 steps)."""
    if not ctx.reproduces:
        return None
    util = round(below - 0.01, 2)
    while util >= floor:
        if ctx.starts({"gpu_memory_utilization": util}):
            return util
        util = round(util - 0.01, 2)
    return None


def largest_value(ctx: FixContext, name: str, below: int, floor: int, step: int) -> int | None:
    """The largest value of an integer flag in [floor, below) that starts, by bisection."""
    if not ctx.reproduces or not ctx.starts({name: floor}):
        return None
    low, high = floor // step, (below - 1) // step  # in units of `step`; `low` starts
    while low < high:
        middle = (low + high + 1) // 2
        if ctx.starts({name: middle * step}):
            low = middle
        else:
            high = middle - 1
    return low * step


def largest_power_of_two(ctx: FixContext, name: str, below: int, floor: int = 1) -> int | None:
    if not ctx.reproduces:
        return None
    value = 1 << max(0, (below - 1).bit_length() - 1)  # largest power of two below `below`
    while value >= floor:
        if ctx.starts({name: value}):
            return value
        value //= 2
    return None


# --- per kind -------------------------------------------------------------------------------


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
    util, total, kv = _util(ctx), _total(ctx), _needed_and_available_kv(ctx)
    if util is None:
        return None
    if total is not None and kv is not None:
        # the budget grows by (new - old) x total; all of it goes to the KV cache
        new = _ceil2(util + (kv[0] - kv[1]) / total + 0.01)
        reason = (
            f"raise --gpu-memory-utilization from {util:g} to {new:g}: +{_gib((new - util) * total)}"
            f" for the KV cache, which needs {_gib(kv[0])} for one full-length request"
        )
        return _if_safe(
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


def _if_safe(ctx: FixContext, util: float, option: Option) -> Option | None:
    free, total = ctx.figure("free_at_startup_bytes"), _total(ctx)
    if util > MAX_SAFE_UTILIZATION:
        return None
    if free is not None and total is not None and util * total > free:
        return None  # vLLM checks the budget against the memory free at start-up
    return option


def _fp8_kv(ctx: FixContext) -> Option | None:
    dtype = ctx.flags.get("kv_cache_dtype", "auto")
    if dtype not in ("auto", "bfloat16", "float16"):
        return None
    ratio = _shortfall_ratio(ctx)
    if ratio is not None and ratio > 2:
        return None  # even at one byte per element one request does not fit
    reason = "--kv-cache-dtype fp8 stores one byte per element instead of two: twice the tokens"
    return Option({"kv_cache_dtype": "fp8"}, reason, {"kv_cache_dtype": dtype}, ratio is not None)


def no_kv_memory_options(ctx: FixContext) -> list[Option]:
    options = [_util_above_non_kv(ctx), _back_to_default_util(ctx)]
    util = _util(ctx)
    if util is not None:
        found = smallest_utilization(ctx, util)
        if found is not None:
            reason = (
                f"raise --gpu-memory-utilization from {util:g} to {found:g}: the planner's smallest"
            )
            options.append(
                Option({"gpu_memory_utilization": found}, reason, {"gpu_memory_utilization": util})
            )
    options += _smaller_batch(ctx, _peak_flags(ctx))
    if ctx.reproduces or ctx.figure("cuda_graph_estimate_bytes") is not None:
        options.append(_eager(ctx))  # helps only where graph memory is inside the budget
    return [o for o in options if o]


def _peak_flags(ctx: FixContext) -> tuple[str, ...]:
    """The flags that size the profile run's activation peak in this engine."""
    if ctx.resolved("enable_chunked_prefill", ctx.parsed.engine == "V1"):
        return ("max_num_seqs", "max_num_batched_tokens")  # V1 adds max_num_seqs x vocab logits
    return ("max_model_len", "max_num_seqs")  # V0 profiles a whole max_model_len prompt


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
    util, total = _util(ctx), _total(ctx)
    budget, kv = ctx.figure("budget_bytes"), ctx.figure("kv_cache_bytes")
    if None in (util, total, budget, kv) or kv > 0:  # type: ignore[operator]
        return None
    assert util is not None and total is not None and budget is not None and kv is not None
    non_kv = budget - kv  # weights + activation peak + non-torch, as vLLM measured them
    new = _ceil2(non_kv / total + HEADROOM_UTILIZATION)
    reason = (
        f"raise --gpu-memory-utilization from {util:g} to {new:g}: the non-KV memory alone is "
        f"{_gib(non_kv)} ({non_kv / total:.2f} of the GPU); this leaves about "
        f"{_gib(new * total - non_kv)} for the KV cache"
    )
    return _if_safe(
        ctx,
        new,
        Option(
            {"gpu_memory_utilization": new}, reason, {"gpu_memory_utilization": util}, from_log=True
        ),
    )


def _smaller_batch(ctx: FixContext, names: tuple[str, ...]) -> list[Option]:
    """Lower the flags that size the profile run's activation peak, as little as starts."""
    options = []
    for name in names:
        old = ctx.resolved(name)
        if not isinstance(old, int) or old <= 1:
            continue
        if ctx.reproduces:
            if name == "max_model_len":
                new = largest_value(ctx, name, old, MIN_LENGTH, LENGTH_STEP)
            else:
                new = largest_power_of_two(ctx, name, old, floor=16 if "tokens" in name else 1)
            how = "the planner's largest that starts"
        else:
            new, how = old // 2, "halves what it adds to the peak"  # the planner cannot tell
        if new is None or new < 1:
            continue
        reason = f"lower --{name.replace('_', '-')} from {old:,} to {new:,}: {how}"
        options.append(Option({name: new}, reason, {name: old}))
    return options


def _eager(ctx: FixContext) -> Option | None:
    if ctx.flags.get("enforce_eager"):
        return None
    reason = "--enforce-eager: no CUDA graphs, their memory goes to the KV cache (slower decode)"
    return Option({"enforce_eager": True}, reason, {"enforce_eager": False})


def free_memory_options(ctx: FixContext) -> list[Option]:
    free, total, util = ctx.figure("free_at_startup_bytes"), _total(ctx), _util(ctx)
    if free is None or total is None:
        return []
    new = _floor2(free / total - 0.01)  # 1% below what was free, for what moves meanwhile
    reason = (
        f"lower --gpu-memory-utilization from {util if util is not None else '?'} to {new:g}: "
        f"{_gib(free)} of {_gib(total)} was free at start-up"
    )
    option = Option({"gpu_memory_utilization": new}, reason, {"gpu_memory_utilization": util}, True)
    if ctx.starts(option.changes) is False:
        # the smaller budget no longer fits max_model_len: shorten it as well
        length = _length_at(ctx, option.changes)
        if length is not None:
            changes = option.changes | {"max_model_len": length}
            reason += f", with --max-model-len {length:,} to fit the smaller KV cache"
            return [
                Option(
                    changes,
                    reason,
                    option.previous | {"max_model_len": ctx.flags.get("max_model_len")},
                    True,
                )
            ]
    return [option]


def _length_at(ctx: FixContext, changes: dict[str, Any]) -> int | None:
    old = ctx.resolved("max_model_len")
    if not isinstance(old, int) or old <= MIN_LENGTH:
        return None
    return largest_value(ctx.with_changes(changes), "max_model_len", old, MIN_LENGTH, LENGTH_STEP)


def _failed_allocation(ctx: FixContext) -> tuple[float, float] | None:
    """(bytes PyTorch tried to allocate, bytes free) from the first OOM message that says."""
    for hit in ctx.parsed.signals.get("cuda_oom", ()):
        sizes = explain.torch_oom_sizes(hit.line.message)
        if sizes is not None:
            return sizes
    return None


def _less_util(ctx: FixContext, needed: float | None, what: str) -> Option | None:
    util, total = _util(ctx), _total(ctx)
    if util is None or total is None or needed is None:
        return None
    new = _floor2(util - needed / total - 0.005)
    if new <= 0.3:
        return None
    reason = (
        f"lower --gpu-memory-utilization from {util:g} to {new:g}: leaves {_gib(needed)} more "
        f"outside the budget for {what}"
    )
    return Option({"gpu_memory_utilization": new}, reason, {"gpu_memory_utilization": util}, True)


def _planned_less_util(ctx: FixContext, what: str) -> Option | None:
    util = _util(ctx)
    found = None if util is None else largest_utilization(ctx, util)
    if found is None:
        return None
    reason = (
        f"lower --gpu-memory-utilization from {util:g} to {found:g}: leaves room outside the "
        f"budget for {what} (the planner's largest that starts)"
    )
    return Option({"gpu_memory_utilization": found}, reason, {"gpu_memory_utilization": util})


def _shortfall(ctx: FixContext) -> float | None:
    failed = _failed_allocation(ctx)
    # the missing bytes plus one more allocation of the same size, as margin
    return None if failed is None else max(failed[0] - failed[1], 0.0) + failed[0]


def sampler_options(ctx: FixContext) -> list[Option]:
    what = "the sampler warm-up"
    options = [_less_util(ctx, _shortfall(ctx), what) or _planned_less_util(ctx, what)]
    options += _smaller_batch(ctx, ("max_num_seqs",))
    return [o for o in options if o]


def capture_options(ctx: FixContext) -> list[Option]:
    graphs = ctx.figure("cuda_graph_estimate_bytes") or ctx.figure("cuda_graph_bytes")
    options = [
        _less_util(ctx, graphs or _shortfall(ctx), "the CUDA graphs")
        or _planned_less_util(ctx, "the CUDA graphs"),
        _eager(ctx),
    ]
    options += _smaller_batch(ctx, ("max_num_seqs",))
    return [o for o in options if o]


def profile_run_options(ctx: FixContext) -> list[Option]:
    options = _smaller_batch(ctx, _peak_flags(ctx))
    if not ctx.resolved("enable_chunked_prefill", ctx.parsed.engine == "V1"):
        reason = (
            "--enable-chunked-prefill: the profile run then covers max_num_batched_tokens "
            "tokens instead of a whole max_model_len prompt"
        )
        options.append(
            Option({"enable_chunked_prefill": True}, reason, {"enable_chunked_prefill": False})
        )
    return options


def allocation_options(ctx: FixContext) -> list[Option]:
    what = "what else holds memory"
    option = _less_util(ctx, _shortfall(ctx), what) or _planned_less_util(ctx, what)
    return [option] if option else []


def runtime_options(ctx: FixContext) -> list[Option]:
    what = "run-time activations"
    options = [_less_util(ctx, _shortfall(ctx), what) or _planned_less_util(ctx, what)]
    options += _smaller_batch(ctx, ("max_num_batched_tokens",))
    return [o for o in options if o]


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
    return free_memory_options(ctx) or allocation_options(ctx)


def host_ram_options(ctx: FixContext) -> list[Option]:
    swap = ctx.flags.get("swap_space")
    if ctx.parsed.engine == "V0" and swap != 0:
        reason = "--swap-space 0: V0 pins swap_space GiB of host RAM per GPU (4 by default)"
        return [Option({"swap_space": 0}, reason, {"swap_space": swap if swap is not None else 4})]
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
        options.append(Option({"max_num_seqs": running - 1}, reason, previous))
    return [o for o in options if o]


def _larger_pool(ctx: FixContext) -> Option | None:
    """The highest gpu_memory_utilization that still starts (the planner's), for more KV."""
    util = _util(ctx)
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


def unlocalised_oom_options(ctx: FixContext) -> list[Option]:
    util = _util(ctx)
    if util is None:
        return []
    new = round(util - 0.05, 2)
    reason = (
        f"lower --gpu-memory-utilization from {util:g} to {new:g}: more headroom outside the budget"
    )
    return [Option({"gpu_memory_utilization": new}, reason, {"gpu_memory_utilization": util})]


PRESCRIBERS: dict[str, Callable[[FixContext], list[Option]]] = {
    kinds.MAX_MODEL_LEN_EXCEEDS_KV_CACHE: max_model_len_options,
    kinds.NO_KV_CACHE_MEMORY: no_kv_memory_options,
    kinds.INSUFFICIENT_FREE_MEMORY: free_memory_options,
    kinds.CUDA_OOM_SAMPLER_WARMUP: sampler_options,
    kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE: capture_options,
    kinds.CUDA_OOM_PROFILE_RUN: profile_run_options,
    kinds.CUDA_OOM_KV_CACHE_ALLOCATION: allocation_options,
    kinds.CUDA_OOM_RUNTIME: runtime_options,
    kinds.WEIGHTS_EXCEED_MEMORY: weights_options,
    kinds.ANOTHER_PROCESS: another_process_options,
    kinds.HOST_RAM: host_ram_options,
    kinds.PREEMPTION: preemption_options,
    kinds.CUDA_OOM: unlocalised_oom_options,
}


def options_for(ctx: FixContext, kind: str) -> list[Option]:
    prescriber = PRESCRIBERS.get(kind)
    return [] if prescriber is None else prescriber(ctx)
