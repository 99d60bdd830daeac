"""The knobs a fix turns, and the planner searches that size each one.

Values are read from the log where vLLM printed them; otherwise the planner searches for the
smallest change that starts. A search runs only when the planner reproduces the failure the
log shows (`FixContext.reproduces`): a planner that predicts a start would answer "no change".
"""

from __future__ import annotations

import math

from kvwise.doctor.figures import GIB
from kvwise.doctor.fix import MAX_SAFE_UTILIZATION, FixContext, Option

LENGTH_STEP = 256  # lengths are rounded down to whole blocks (block sizes divide 256)
MIN_LENGTH = 256


def floor2(value: float) -> float:
    return math.floor(value * 100 + 1e-9) / 100


def ceil2(value: float) -> float:
    return math.ceil(value * 100 - 1e-9) / 100


def gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB" if abs(value) >= GIB else f"{value / 2**20:.0f} MiB"


def gpu_total(ctx: FixContext) -> float | None:
    total = ctx.figure("total_bytes")
    return total if total is not None else (ctx.gpu.memory_bytes if ctx.gpu else None)


def logged_util(ctx: FixContext) -> float | None:
    value = ctx.resolved("gpu_memory_utilization")
    return None if value is None else float(value)


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


def peak_flags(ctx: FixContext) -> tuple[str, ...]:
    """The flags that size the profile run's activation peak in this engine."""
    if ctx.resolved("enable_chunked_prefill", ctx.parsed.engine == "V1"):
        return ("max_num_seqs", "max_num_batched_tokens")  # V1 adds max_num_seqs x vocab logits
    return ("max_model_len", "max_num_seqs")  # V0 profiles a whole max_model_len prompt


def smaller_batch(ctx: FixContext, names: tuple[str, ...]) -> list[Option]:
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


def eager(ctx: FixContext) -> Option | None:
    if ctx.flags.get("enforce_eager"):
        return None
    reason = "--enforce-eager: no CUDA graphs, their memory goes to the KV cache (slower decode)"
    return Option({"enforce_eager": True}, reason, {"enforce_eager": False})


def if_safe(ctx: FixContext, util: float, option: Option) -> Option | None:
    free, total = ctx.figure("free_at_startup_bytes"), gpu_total(ctx)
    if util > MAX_SAFE_UTILIZATION:
        return None
    if free is not None and total is not None and util * total > free:
        return None  # vLLM checks the budget against the memory free at start-up
    return option
