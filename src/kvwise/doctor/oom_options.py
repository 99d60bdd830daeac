"""Candidate changes for an out-of-memory error at a start-up stage (or while serving).

The size of the change comes from PyTorch's own message where it says how much it tried to
allocate and how much was free; otherwise from the planner's search.
"""

from __future__ import annotations

from kvwise.doctor import torch_oom
from kvwise.doctor.figures import GIB
from kvwise.doctor.fix import FixContext, Option
from kvwise.doctor.levers import (
    eager,
    floor2,
    gib,
    gpu_total,
    largest_utilization,
    logged_util,
    peak_flags,
    smaller_batch,
)

MIN_STEP_BYTES = GIB // 2  # the least a lower utilization should free for a failed stage
GRAPH_FLOOR_BYTES = GIB  # vLLM: "CUDA graphs can take additional 1~3 GiB memory per GPU"


def _failed_allocation(ctx: FixContext) -> tuple[float, float] | None:
    """(bytes PyTorch tried to allocate, bytes free) from the first OOM message that says."""
    for hit in ctx.parsed.signals.get("cuda_oom", ()):
        sizes = torch_oom.sizes(hit.line.message)
        if sizes is not None:
            return sizes
    return None


def _less_util(ctx: FixContext, needed: float | None, what: str) -> Option | None:
    util, total = logged_util(ctx), gpu_total(ctx)
    if util is None or total is None or needed is None:
        return None
    new = floor2(util - needed / total - 0.005)
    if new <= 0.3:
        return None
    reason = (
        f"lower --gpu-memory-utilization from {util:g} to {new:g}: leaves {gib(needed)} more "
        f"outside the budget for {what}"
    )
    # sized from one failed allocation, not vLLM's own arithmetic: the planner may refute it
    return Option({"gpu_memory_utilization": new}, reason, {"gpu_memory_utilization": util})


def _planned_less_util(ctx: FixContext, what: str) -> Option | None:
    util = logged_util(ctx)
    found = None if util is None else largest_utilization(ctx, util)
    if found is None:
        return None
    reason = (
        f"lower --gpu-memory-utilization from {util:g} to {found:g}: leaves room outside the "
        f"budget for {what} (the planner's largest that starts)"
    )
    return Option({"gpu_memory_utilization": found}, reason, {"gpu_memory_utilization": util})


def _shortfall(ctx: FixContext, floor: float = MIN_STEP_BYTES) -> float | None:
    failed = _failed_allocation(ctx)
    # the missing bytes plus one more allocation of the same size, as margin; one failed
    # allocation understates what the stage needs, hence the floor
    return None if failed is None else max(failed[0] - failed[1] + failed[0], floor)


def sampler_options(ctx: FixContext) -> list[Option]:
    what = "the sampler warm-up"
    options = [_less_util(ctx, _shortfall(ctx), what), _planned_less_util(ctx, what)]
    options += smaller_batch(ctx, ("max_num_seqs",))
    return [o for o in options if o]


def capture_options(ctx: FixContext) -> list[Option]:
    what = "the CUDA graphs"
    graphs = ctx.figure("cuda_graph_estimate_bytes") or ctx.figure("cuda_graph_bytes")
    # the graph memory vLLM logged, else vLLM's own note: "CUDA graphs can take additional
    # 1~3 GiB memory per GPU", else what the planner finds
    sized = _less_util(ctx, graphs or _shortfall(ctx, floor=GRAPH_FLOOR_BYTES), what)
    options = [sized, _planned_less_util(ctx, what), eager(ctx)]
    options += smaller_batch(ctx, ("max_num_seqs",))
    return [o for o in options if o]


def profile_run_options(ctx: FixContext) -> list[Option]:
    options = smaller_batch(ctx, peak_flags(ctx))
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
    options = [_less_util(ctx, _shortfall(ctx), what), _planned_less_util(ctx, what)]
    return [o for o in options if o]


def runtime_options(ctx: FixContext) -> list[Option]:
    what = "run-time activations"
    options = [_less_util(ctx, _shortfall(ctx), what), _planned_less_util(ctx, what)]
    options += smaller_batch(ctx, ("max_num_batched_tokens",))
    return [o for o in options if o]


def unlocalised_oom_options(ctx: FixContext) -> list[Option]:
    """Nothing places the error, so no flag can be sized: the advice asks for the full log."""
    return []
