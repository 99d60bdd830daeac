"""Small builders for the simulator's tests: requests, schedulers, engines with round numbers."""

from __future__ import annotations

from kvwise.sim.block_pool import NULL_BLOCK, BlockPool
from kvwise.sim.engine import EngineConfig
from kvwise.sim.kv_cache_manager import KVCacheManager
from kvwise.sim.request import Request, Segment
from kvwise.sim.runner import OUTPUT_SEG_BASE, SimConfig
from kvwise.sim.scheduler import Scheduler, SchedulerConfig, StepPlan
from kvwise.sim.steptime import StepCost, StepTimeCoefficients


def request(
    request_id: int,
    prompt: list[Segment] | int,
    output_len: int = 4,
    *,
    max_tokens: int | None = None,
) -> Request:
    """A request whose prompt is one fresh segment (id 1000 + request_id) or the given segments."""
    segments = [(1000 + request_id, prompt)] if isinstance(prompt, int) else list(prompt)
    return Request(
        request_id,
        segments,
        max_tokens or output_len,
        output_len=output_len,
        output_seg_id=OUTPUT_SEG_BASE + request_id,
    )


def scheduler(
    num_gpu_blocks: int,
    *,
    block_size: int = 4,
    max_num_seqs: int = 8,
    max_num_batched_tokens: int = 16,
    max_model_len: int = 1024,
    enable_prefix_caching: bool = True,
    reserve_full_isl: bool = True,
    is_v0: bool = False,
    v0_watermark_blocks: int = -1,
    num_scheduler_steps: int = 1,
) -> Scheduler:
    kv = KVCacheManager(
        num_gpu_blocks,
        block_size,
        enable_prefix_caching=enable_prefix_caching,
        max_model_len=max_model_len,
    )
    config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        enable_chunked_prefill=not is_v0,
        reserve_full_isl=reserve_full_isl,
        is_v0=is_v0,
        num_scheduler_steps=num_scheduler_steps,
        v0_watermark_blocks=v0_watermark_blocks,
    )
    return Scheduler(config, kv)


def step(s: Scheduler) -> tuple[StepPlan, list[Request], list[Request]]:
    """One engine step: schedule, then sample a token for every fully computed request."""
    plan = s.schedule()
    produced, finished = s.update_after_step(plan)
    return plan, produced, finished


def scheduled(plan: StepPlan) -> list[tuple[int, int]]:
    """(request id, tokens) pairs of a step, in schedule order."""
    return [(r.request_id, n) for r, n in zip(plan.scheduled, plan.scheduled_tokens, strict=False)]


def ids(requests: object) -> list[int]:
    return [r.request_id for r in requests]  # type: ignore[attr-defined]


# A GPU where every step costs exactly 10 ms plus 1 ms per request in it, and nothing else:
# weight read 8 ms (coefficient 1), 2 ms per step, 1 ms per request; API overhead 5 ms.
FLAT_COST = StepCost(
    weight_read_s=0.008,
    kv_read_s_per_token=0.0,
    linear_s_per_token=0.0,
    attention_s_per_pair=0.0,
    allreduce_s_per_token=0.0,
    allreduce_calls=0,
    num_layers=1,
)
FLAT_COEFFICIENTS = StepTimeCoefficients(
    weight_read=1.0,
    kv_read=1.0,
    gemm_compute=1.0,
    attention_compute=1.0,
    allreduce=1.0,
    allreduce_call_s=0.0,
    step_overhead_s=0.002,
    layer_overhead_s=0.0,
    request_overhead_s=0.001,
    api_overhead_s=0.005,
    frontend_token_s=0.0,  # tokens reach the client at their step's end (test_frontend.py: not)
)


def flat_config(num_gpu_blocks: int = 256, **engine: int | bool) -> SimConfig:
    """Defaults: 4-token blocks, max_model_len as long as the pool allows (at most 512)."""
    fields: dict[str, int | bool] = {
        "block_size": 4,
        "max_num_seqs": 16,
        "max_num_batched_tokens": 64,
        "max_model_len": min(512, (num_gpu_blocks - 1) * 4),
    }
    fields |= engine
    return SimConfig(
        EngineConfig(num_gpu_blocks=num_gpu_blocks, **fields), FLAT_COST, FLAT_COEFFICIENTS
    )  # type: ignore[arg-type]


def cached_blocks(pool: BlockPool) -> dict[int, int]:
    """The prefix-cache map, block hash -> block id."""
    return {h: b for h, b in enumerate(pool.cached) if b != NULL_BLOCK}
