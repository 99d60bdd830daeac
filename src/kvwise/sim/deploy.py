"""From a model, a GPU and vLLM flags to a simulated replica, through the planner.

The planner (`kvwise.planner.plan`) resolves vLLM's defaults for the release and sizes the KV
pool exactly as vLLM would at start-up; this module adds the scheduler behaviours that changed
across releases and the step-time model for the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.core.weights import routed_expert_share
from kvwise.errors import InvalidFlagError
from kvwise.planner import Plan, plan
from kvwise.planner.defaults import parse_version, quant_for
from kvwise.planner.memory import runtime_dtype_bytes
from kvwise.sim.calibrated import user_calibration
from kvwise.sim.coefficients import coefficients_with_source
from kvwise.sim.engine import EngineConfig
from kvwise.sim.interconnect import CommCost, Topology, comm_cost
from kvwise.sim.runner import SimConfig
from kvwise.sim.steptime import StepTimeCoefficients, step_cost

# Scheduler behaviour by release, as data: (first release, scheduler_reserve_full_isl).
# vLLM PR #37307 ("schedule requests based on full ISL", merged 2026-03-17) added the whole-
# sequence admission check, on by default; the first release carrying it is taken as 0.18.0.
RESERVE_FULL_ISL_SINCE = "0.18.0"
# --enforce-eager: kernel launches no longer hidden by CUDA graphs, per layer per step. An
# estimate, not a fit (no eager runs in the validation data): ~10 kernels per decoder layer at
# ~5 us of launch overhead each, the cost users report as 10-30 % slower decoding of 7-8B models.
EAGER_LAYER_OVERHEAD_S = 50e-6
# V0's engine process (vLLM 0.6-0.10.1, `vllm/engine/llm_engine.py: LLMEngine.step`) does on the
# host, per running sequence and step, work the GPU waits for: `Scheduler.schedule` (block
# manager, one SequenceGroupMetadata per group), `ModelRunner._prepare_model_input` (inputs
# rebuilt from Python lists every step), the sampler's pythonization and
# `_advance_to_next_step`. Only the output processing (detokenization, stop checks,
# RequestOutputs) overlaps the next forward pass (async output processing, PR #7049; 0.9.1
# `worker/model_runner.py: ModelRunner.execute_model` calls `async_callback` once the forward
# is launched). V1 took this work off the step's critical path (persistent batch, numpy
# inputs, a separate engine-core process). Set from the "vLLM V1" blog (2025-01-27): V1 gave
# "up to 1.7x higher throughput" than V0 without multi-step for Llama 3.1 8B on one H100,
# ShareGPT, with "almost identical" kernels, so the gap is V0's host CPU.
# `benchmarks/v0_cpu.py` finds the cost per sequence that makes a V0 step 1.7x as long as the
# simulated V1 step at V0's full batch (256 decoding sequences) on that set-up: 33 us.
# Multi-step scheduling (`--num-scheduler-steps N`, 0.5-0.7) schedules and prepares inputs once
# per N steps and advances them on the GPU in between; the blog's ratio is for V0 without it,
# so multi-step runs keep the step model as it was (no published figure for what is left).
V0_SEQ_CPU_S = 33e-6


@dataclass(frozen=True)
class Deployment:
    config: SimConfig
    plan: Plan
    coefficients_note: str = ""  # where the step-time coefficients come from, for reports
    gpus_note: str = ""  # the GPUs one replica spans and their links, for reports ("": one GPU)


def _reserve_full_isl(version: str) -> bool:
    return parse_version(version) >= parse_version(RESERVE_FULL_ISL_SINCE)


def _uses_fp8_compute(model: ModelSpec, gpu: GpuSpec) -> bool:
    """W8A8 FP8 checkpoints run their GEMMs on FP8 tensor cores where the GPU has them."""
    return model.quant is not None and model.quant.method == "fp8" and gpu.has_fp8


def deployment(
    model: ModelSpec,
    gpu: GpuSpec,
    flags: VllmFlags,
    *,
    vllm_version: str | None = None,
    vllm_use_v1: bool | None = None,
    coefficients: StepTimeCoefficients | None = None,
    num_gpu_blocks: int | None = None,
    num_scheduler_steps: int = 1,
    label: str = "",
    topology: Topology | None = None,
) -> Deployment:
    """The replica vLLM would start with these flags; InvalidFlagError if it would not start.

    `num_gpu_blocks` replaces the planner's KV pool when the real one is known (a vLLM log).
    `num_scheduler_steps` is V0's multi-step scheduling (`--num-scheduler-steps`, 0.5-0.7).
    `topology`: the nodes and links the replica runs on (None: one node, the card's own link).
    `vllm_use_v1`: the VLLM_USE_V1 the server ran with (None: unset; 0 picks V0 on 0.8-0.10.1).
    """
    result = plan(model, gpu, flags, vllm_version=vllm_version, vllm_use_v1=vllm_use_v1)
    if result.error is not None and num_gpu_blocks is None:
        raise InvalidFlagError(f"vLLM would not start: {result.error.message}")
    resolved = result.flags
    engine = EngineConfig(
        num_gpu_blocks=num_gpu_blocks or result.kv.num_gpu_blocks,
        block_size=resolved.block_size,
        max_num_seqs=resolved.max_num_seqs,
        max_num_batched_tokens=resolved.max_num_batched_tokens,
        max_model_len=resolved.max_model_len,
        enable_prefix_caching=resolved.enable_prefix_caching,
        enable_chunked_prefill=resolved.enable_chunked_prefill,
        reserve_full_isl=_reserve_full_isl(result.vllm_version),
        # V0 with chunked prefill (`Scheduler._schedule_chunked_prefill`: running decodes,
        # then prefill chunks in the token budget) schedules as V1 does; without it, whole
        # prompts first (`_schedule_default`)
        is_v0=result.engine == "V0" and not resolved.enable_chunked_prefill,
        num_scheduler_steps=num_scheduler_steps if result.engine == "V0" else 1,
        v0_block_manager=result.engine == "V0",
    )
    # pipeline stages run one after the other for a step's batch: every stage's weights are
    # read in turn (the planner's figure is the heaviest stage)
    cost = step_cost(
        model,
        gpu,
        weight_bytes_per_rank=result.memory.weights_bytes * resolved.pipeline_parallel_size,
        kv_bytes_per_token=result.kv.bytes_per_token * resolved.pipeline_parallel_size,
        tensor_parallel_size=resolved.tensor_parallel_size,
        use_fp8_compute=_uses_fp8_compute(model, gpu),
        comm=_comm(
            model, gpu, resolved.tensor_parallel_size, resolved.pipeline_parallel_size, topology
        ),
        routed_expert_share=routed_expert_share(
            model,
            tp=resolved.tensor_parallel_size,
            dtype_bytes=runtime_dtype_bytes(resolved),
            quant=quant_for(model, resolved),
        ),
    )
    chosen, note = _coefficients(model, gpu, resolved.tensor_parallel_size, coefficients)
    if resolved.enforce_eager:
        # without CUDA graphs every layer's kernels are launched from Python each step (the
        # fitted sets come from runs with graphs)
        chosen = replace(chosen, layer_overhead_s=chosen.layer_overhead_s + EAGER_LAYER_OVERHEAD_S)
    if result.engine == "V0" and num_scheduler_steps == 1:
        chosen = replace(chosen, request_overhead_s=chosen.request_overhead_s + V0_SEQ_CPU_S)
    config = SimConfig(engine, cost, chosen, label)
    num_gpus = resolved.tensor_parallel_size * resolved.pipeline_parallel_size
    if topology is not None and topology.nodes > 1:
        gpus_note = f"nodes x GPUs: {topology.describe(gpu)}"
    elif topology is not None:
        gpus_note = f"{num_gpus} x {gpu.name} ({topology.links(gpu)[0].name})"
    else:
        gpus_note = f"{num_gpus} x {gpu.name} (the card's own link)" if num_gpus > 1 else ""
    return Deployment(config, result, note, gpus_note)


def _comm(
    model: ModelSpec, gpu: GpuSpec, tp: int, pp: int, topology: Topology | None
) -> CommCost | None:
    return None if topology is None else comm_cost(model, gpu, topology, tp, pp)


def _coefficients(
    model: ModelSpec, gpu: GpuSpec, tp: int, given: StepTimeCoefficients | None
) -> tuple[StepTimeCoefficients, str]:
    """Given coefficients, else the user's calibration (`kvwise calibrate`), else shipped ones."""
    if given is not None:
        return given, "step time: coefficients given by the caller"
    calibrated = user_calibration(gpu.name, model.model_id)
    if calibrated is not None:
        return calibrated
    chosen, source = coefficients_with_source(gpu, tp)
    return chosen, f"step time: shipped coefficients, {source} (not calibrated)"
