"""The fused-MoE layer's memory in vLLM's profile run: what stays allocated across the forward
(alive when the sampler peaks) and what one MoE call holds only while it runs.

Modular fused-MoE kernels (0.13+) take their workspace13/workspace2/output buffers from the
worker's WorkspaceManager (vllm/v1/worker/workspace.py:WorkspaceManager.get_simultaneous, called in
model_executor/layers/fused_moe/modular_kernel.py:_allocate_buffers): one buffer, grown to the
largest request and never freed, so it is still allocated when the sampler runs after the forward.
Buffers a kernel allocates itself are freed when the call returns.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwise.core.gpus import GpuSpec
from kvwise.core.models import DTYPE_BYTES, ModelSpec
from kvwise.planner.defaults import VersionRules, parse_version, quant_for
from kvwise.planner.result import ResolvedFlags

# First release whose modular fused-MoE kernels draw on the persistent WorkspaceManager
# (v0.13.0:vllm/v1/worker/workspace.py; v0.12.0 has none)
WORKSPACE_MANAGER_SINCE = (0, 13, 0)
# Before it the kernels' caches were read as per-call allocations at 0.10.2 and 0.11.0
# (0.11.1-0.12 inherit that reading; earlier V1 releases keep the fitted all-on-top charge)
PER_CALL_CACHES_READ_SINCE = (0, 10, 2)


@dataclass(frozen=True)
class MoeProfileBytes:
    persistent: float  # allocated during the forward and kept: adds to the sampler's peak
    transient: float  # freed before the sampler runs: the peak is the larger of it and the sampler


def _uses_oai_triton_experts(
    model: ModelSpec, gpu: GpuSpec, resolved: ResolvedFlags, rules: VersionRules
) -> bool:
    # MXFP4 experts pick the Triton backend (triton_kernels, shipped as vllm.third_party) on
    # capability 9.0-10.x: fused_moe/oracle/mxfp4.py:select_mxfp4_moe_backend (0.19)
    quant = quant_for(model, resolved)
    if quant is None or quant.method != "mxfp4" or gpu.is_rocm:
        return False
    is_hopper_or_blackwell = 9.0 <= float(gpu.compute_capability) < 11.0
    return is_hopper_or_blackwell and parse_version(rules.version) >= WORKSPACE_MANAGER_SINCE


def moe_profile_bytes(
    model: ModelSpec, gpu: GpuSpec, resolved: ResolvedFlags, rules: VersionRules
) -> MoeProfileBytes:
    moe = model.moe
    if moe is None:
        return MoeProfileBytes(0.0, 0.0)
    dtype_bytes = DTYPE_BYTES[resolved.dtype]
    tokens = resolved.max_num_batched_tokens
    rows = tokens * moe.num_experts_per_tok  # one row per (token, routed expert)
    inter = moe.expert_intermediate_size / resolved.tensor_parallel_size
    if rules.engine == "V1" and _uses_oai_triton_experts(model, gpu, resolved, rules):
        # gpt_oss_triton_kernels_moe.py:OAITritonExperts.workspace_shapes: workspace13 (0, 0),
        # workspace2 [rows, intermediate] (the SwiGLU output), output [tokens, hidden] from
        # the shared buffer; matmul_ogs allocates the gate_up output [rows, 2 x intermediate]
        # inside the call ("workspace are allocated inside the kernel")
        persistent = (rows * inter + tokens * model.hidden_size) * dtype_bytes
        return MoeProfileBytes(persistent=persistent, transient=rows * 2 * inter * dtype_bytes)
    per_call = rows * (3 * inter + model.hidden_size) * dtype_bytes
    if rules.engine == "V1" and PER_CALL_CACHES_READ_SINCE <= parse_version(rules.version) < (
        WORKSPACE_MANAGER_SINCE
    ):
        # before the WorkspaceManager every fused-MoE kernel allocates its caches inside the call
        # (0.10.2/0.11.0 gpt-oss on Hopper: fused_marlin_moe's intermediate caches, or
        # triton_kernels' matmul_ogs outputs, mxfp4.py:get_mxfp4_backend), freed before the sampler
        return MoeProfileBytes(persistent=0.0, transient=per_call)
    # Other kernels: gate/up output (2 x intermediate), activation output, down output (hidden)
    # per routed row, all charged on top (Qwen3-30B-A3B, vLLM 0.19: 2.68 GiB logged vs 2.18 for
    # its dense-equivalent shapes)
    return MoeProfileBytes(persistent=per_call, transient=0.0)
