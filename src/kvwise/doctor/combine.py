"""When no single change starts: the smallest combination that does, else what would.

Every candidate here is the planner's: a set of toggles (fp8 KV cache, no CUDA graphs) with, if
needed, one number moved as little as starts (max_model_len, max_num_seqs,
gpu_memory_utilization). The search runs only where the planner reproduces the logged failure;
when nothing within these knobs starts on this GPU, `beyond_the_knobs` says so and plans what
would: the same flags over more GPUs, or a smaller checkpoint.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations
from typing import Any

from kvwise.core.quant import parse_quantization
from kvwise.doctor.command import flags_text
from kvwise.doctor.figures import GIB
from kvwise.doctor.fix import FixContext, Option
from kvwise.doctor.levers import (
    LENGTH_STEP,
    MIN_LENGTH,
    largest_power_of_two,
    largest_utilization,
    largest_value,
    smallest_utilization,
)

TOGGLES: tuple[tuple[str, Any], ...] = (("kv_cache_dtype", "fp8"), ("enforce_eager", True))
MAX_KEPT = 3  # the best combination and two alternatives
MORE_GPUS = (2, 4, 8)  # tensor-parallel sizes tried beyond the logged one


def combined_options(ctx: FixContext) -> list[Option]:
    """The cheapest combinations that start, when the planner reproduces the failure."""
    if not ctx.can_plan or not ctx.reproduces:
        return []
    found = []
    for toggles in _toggle_sets(ctx):
        base = ctx.with_changes(toggles)
        if toggles and ctx.starts(toggles):
            found.append(_option(ctx, toggles))
            continue
        for number in _one_number(base):
            found.append(_option(ctx, toggles | number))
    has_single = any(len(option.changes) == 1 for option in found)
    found = [_worded(option, has_single) for option in found]
    return sorted(found, key=lambda option: option.cost)[:MAX_KEPT]


def _toggle_sets(ctx: FixContext) -> list[dict[str, Any]]:
    free = [(name, value) for name, value in TOGGLES if ctx.flags.get(name) != value]
    return [dict(pair) for size in range(len(free) + 1) for pair in combinations(free, size)]


def _one_number(ctx: FixContext) -> list[dict[str, Any]]:
    """Each number flag moved as little as makes `ctx`'s configuration start."""
    found: list[dict[str, Any]] = []
    length = ctx.resolved("max_model_len")
    if isinstance(length, int) and length > MIN_LENGTH:
        value = largest_value(ctx, "max_model_len", length, MIN_LENGTH, LENGTH_STEP)
        found.append({"max_model_len": value})
    seqs = ctx.resolved("max_num_seqs")
    if isinstance(seqs, int) and seqs > 1:
        found.append({"max_num_seqs": largest_power_of_two(ctx, "max_num_seqs", seqs)})
    util = ctx.resolved("gpu_memory_utilization")
    if isinstance(util, float):
        found.append({"gpu_memory_utilization": smallest_utilization(ctx, util)})
        found.append({"gpu_memory_utilization": largest_utilization(ctx, util)})
    return [changes for changes in found if None not in changes.values()]


def _option(ctx: FixContext, changes: dict[str, Any]) -> Option:
    previous = {name: ctx.resolved(name) for name in changes}
    words = [_change_words(name, value, previous[name]) for name, value in changes.items()]
    return Option(changes, " with ".join(words), previous, plan=ctx.plan(changes))


def _worded(option: Option, has_single: bool) -> Option:
    """The reason, once it is known whether any single change starts it too."""
    if len(option.changes) == 1:
        why = "the planner's smallest change that starts it"
    elif has_single:
        why = "a smaller change than any single one that starts it (the planner's)"
    else:
        why = "no single change starts it, this combination does"
    return replace(option, reason=f"{option.reason}: {why}")


def _change_words(name: str, value: Any, old: Any) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag
    if isinstance(value, str):
        return f"{flag} {value}"
    was = f" (from {_number(old)})" if isinstance(old, (int, float)) else ""
    return f"{flag} {_number(value)}{was}"


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def beyond_the_knobs(ctx: FixContext) -> str:
    """Nothing within the flags starts it on this GPU: say so, and what would (planned)."""
    gpu = ctx.gpu.name if ctx.gpu is not None else "this GPU"
    text = (
        "no change of --max-model-len, --max-num-seqs, --gpu-memory-utilization, "
        f"--kv-cache-dtype or --enforce-eager, alone or combined, starts it on {gpu}"
    )
    more = _more_gpus(ctx)
    if more is not None:
        text += f"; what would: {more}"
    quantized = _quantized(ctx)
    if quantized is not None:
        text += f"; or {quantized}"
    return text


# checkpoints of the same model with fewer weight bytes, as their config.json states them, and
# the least compute capability vLLM runs them on (docs.vllm.ai, features/quantization/
# supported_hardware, v0.9.2: FP8 through Marlin from Ampere 8.0, GPTQ from Volta 7.0)
SMALLER_CHECKPOINTS: tuple[tuple[str, dict[str, Any], float], ...] = (
    ("an FP8 checkpoint", {"quant_method": "fp8"}, 8.0),
    ("a 4-bit GPTQ checkpoint", {"quant_method": "gptq", "bits": 4, "group_size": 128}, 7.0),
)


def _quantized(ctx: FixContext) -> str | None:
    """The first smaller checkpoint of this model that starts here with the logged flags."""
    model, before = ctx.model, ctx.plan()
    if model is None or before is None or model.quant is not None or ctx.flags.get("quantization"):
        return None
    weights = before.memory.weights_bytes / GIB
    capability = _capability(ctx)
    for label, config, least in SMALLER_CHECKPOINTS:
        if capability is None or capability < least:
            continue  # vLLM has no kernel for it on this GPU
        quant = parse_quantization(config, model.model_id)
        plan = replace(ctx, model=model.with_quant(quant)).plan(quiet=True)
        if plan is not None and plan.starts:
            return (
                f"{label} of this model starts on this GPU (weights "
                f"{plan.memory.weights_bytes / GIB:.1f} GiB instead of {weights:.1f} GiB, KV "
                f"cache {plan.memory.kv_cache_bytes / GIB:.2f} GiB, {plan.kv.tokens:,} tokens)"
            )
    return (
        f"no quantized checkpoint of this model that vLLM runs on this GPU fits it either (its "
        f"weights are {weights:.1f} GiB in {model.dtype} here)"
    )


def _capability(ctx: FixContext) -> float | None:
    try:
        return float(ctx.gpu.compute_capability) if ctx.gpu is not None else None
    except (TypeError, ValueError):  # not an NVIDIA compute capability (AMD's gfx names)
        return None


def _more_gpus(ctx: FixContext) -> str | None:
    """The fewest GPUs that start it, with the logged flags or their smallest combination."""
    tp = int(ctx.flags.get("tensor_parallel_size") or 1)
    for factor in MORE_GPUS:
        layout = {"tensor_parallel_size": tp * factor}
        plan = ctx.plan(layout, quiet=True)
        if plan is None:
            continue  # a size the model's heads do not divide by
        changes = layout
        if not plan.starts:
            combined = combined_options(ctx.with_changes(layout))
            if not combined or combined[0].plan is None:
                continue
            changes, plan = layout | combined[0].changes, combined[0].plan
        return (
            f"{flags_text(changes)} over {plan.num_gpus} such GPUs starts (KV cache "
            f"{plan.memory.kv_cache_bytes / GIB:.2f} GiB per GPU, {plan.kv.tokens:,} tokens)"
        )
    return None
