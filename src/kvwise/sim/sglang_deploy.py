"""From a model, a GPU and SGLang's flags to a simulated SGLang replica, through the SGLang planner.

The planner (`kvwise.planner.sglang`) gives the pool (`max_total_num_tokens`), the running cap
(`max_running_requests`), the chunk (`chunked_prefill_size`) and the context length SGLang
starts with for the release; this module runs them on SGLang's scheduler variant
(`sglang_scheduler.py`) with one-token blocks (page_size 1). The step time is the same model and
coefficients as vLLM's replica on that GPU (`deploy.py`): kernel speed is not compared.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.errors import InvalidFlagError
from kvwise.planner.defaults import resolve_flags, rules_for
from kvwise.planner.kv import kv_dtype_bytes
from kvwise.planner.sglang import SglangFlags, SglangPlan, plan_sglang
from kvwise.planner.sglang.pool import cell_bytes
from kvwise.planner.sglang.releases import release_key
from kvwise.sim.calibrated import user_calibration
from kvwise.sim.coefficients import coefficients_for
from kvwise.sim.engine import EngineConfig
from kvwise.sim.runner import SimConfig
from kvwise.sim.sglang_scheduler import PAGE_SIZE, default_schedule_policy
from kvwise.sim.steptime import step_cost


@dataclass(frozen=True)
class SglangDeployment:
    config: SimConfig
    plan: SglangPlan
    schedule_policy: str
    coefficients_note: str = ""
    radix_cache: bool = True


def _kv_bytes(model: ModelSpec, gpu: GpuSpec, flags: VllmFlags) -> int:
    """Bytes per KV value, with the dtypes resolved as the SGLang planner resolves them."""
    resolved = resolve_flags(model, gpu, flags, rules_for(None))
    return kv_dtype_bytes(resolved.kv_cache_dtype, resolved.dtype)


def sglang_deployment(
    model: ModelSpec,
    gpu: GpuSpec,
    flags: VllmFlags,
    sglang: SglangFlags | None = None,
    *,
    schedule_policy: str | None = None,
    disable_radix_cache: bool = False,
) -> SglangDeployment:
    """The replica SGLang would start; InvalidFlagError if it would not start.
    `disable_radix_cache`: SGLang's `--disable-radix-cache` (no prefix is ever reused)."""
    sglang = sglang or SglangFlags()
    result = plan_sglang(model, gpu, flags, sglang)
    if result.error is not None:
        raise InvalidFlagError(f"SGLang would not start: {result.error}")
    policy = schedule_policy or default_schedule_policy(
        None if sglang.version is None else release_key(sglang.version)  # checked by the plan
    )
    chunk = result.chunked_prefill_size
    engine = EngineConfig(
        num_gpu_blocks=result.max_total_num_tokens + 1,  # the block pool counts a null block
        block_size=PAGE_SIZE,
        max_num_seqs=result.max_running_requests,
        # --chunked-prefill-size -1 turns chunking off: a prefill batch takes whole prompts
        max_num_batched_tokens=chunk if chunk > 0 else result.context_length,
        # SGLang starts with a pool below the context length and then rejects longer requests
        # (max_req_input_len, docs/sglang_rules.md): the engine rejects past the smaller
        max_model_len=min(result.context_length, result.max_total_num_tokens),
        enable_prefix_caching=not disable_radix_cache,  # the radix cache is on by default
        enable_chunked_prefill=True,
        scheduler="sglang",
        schedule_policy=policy,
    )
    cost = step_cost(
        model,
        gpu,
        weight_bytes_per_rank=result.weights_bytes,
        kv_bytes_per_token=cell_bytes(model, result.tp, _kv_bytes(model, gpu, flags)),
        tensor_parallel_size=result.tp,
        use_fp8_compute=model.quant is not None and model.quant.method == "fp8" and gpu.has_fp8,
    )
    calibrated = user_calibration(gpu.name, model.model_id)
    if calibrated is not None:
        coefficients, note = calibrated
    else:
        coefficients = coefficients_for(gpu, result.tp)
        note = f"step time: shipped coefficients for {gpu.name} (not calibrated)"
    config = SimConfig(engine, cost, coefficients, "sglang")
    return SglangDeployment(config, result, policy, note, not disable_radix_cache)
