"""Changes for failures while serving: a max_model_len that holds the longest request, and the
gateway in front of vLLM for what no flag fixes (history trimming, KV-token admission)."""

from __future__ import annotations

from collections.abc import Callable

from kvwise.doctor import kinds
from kvwise.doctor.figures import GIB
from kvwise.doctor.fix import FixContext, Option
from kvwise.doctor.levers import LENGTH_STEP
from kvwise.doctor.parse import ParsedLog
from kvwise.doctor.runtime import admission_remedy, gateway_remedy, over_long


def context_length_options(ctx: FixContext) -> list[Option]:
    """A max_model_len that holds the longest request, if the model and the GPU allow it."""
    found = over_long(ctx.parsed)
    if found is None or found.requested is None or not ctx.can_plan or ctx.model is None:
        return []
    needed = -(-found.requested // LENGTH_STEP) * LENGTH_STEP
    native = ctx.model.max_position_embeddings
    if needed > native:
        ctx.notes.append(
            f"the longest request ({found.requested:,} tokens) is beyond the model's own limit "
            f"({native:,} tokens in its config.json): only trimming helps"
        )
        return []
    previous = {"max_model_len": found.limit}
    plan = ctx.plan({"max_model_len": needed})
    if plan is not None and plan.starts:
        reason = (
            f"raise --max-model-len from {found.limit:,} to {needed:,}: the longest request "
            f"({found.requested:,} tokens) fits, and the planner says it starts (KV cache "
            f"{plan.memory.kv_cache_bytes / GIB:.2f} GiB, {plan.kv.max_concurrency:.2f} such "
            "requests at once)"
        )
        return [Option({"max_model_len": needed}, reason, previous)]
    ctx.notes.append(
        f"--max-model-len {needed:,} (the longest request) does not start on this GPU: "
        f"the planner predicts {plan.error.kind if plan and plan.error else 'a failure'}"
    )
    return []


# what no vLLM flag carries: the gateway in front of vLLM, per kind
REMEDIES: dict[str, Callable[[ParsedLog], str]] = {
    kinds.CONTEXT_LENGTH: gateway_remedy,
    kinds.PREEMPTION: admission_remedy,
    kinds.REQUEST_TIMEOUT: admission_remedy,
}
