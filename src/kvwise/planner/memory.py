"""The non-KV parts of vLLM's start-up budget, per GPU: weights, activation peak, non-torch
memory, CUDA graphs, and the CUDA context that lives outside the budget.

Every constant names its source: a vLLM file and function at a release, or the start-up logs it
is fitted on (`tests/data/validation/vllm_startup_logs.jsonl`, in-sample). No case is
special-cased. docs/vllm_rules.md lists the rules per release family.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from kvwise.core.gpus import GIB, GpuSpec
from kvwise.core.models import DTYPE_BYTES, ModelSpec
from kvwise.core.quant import QuantSpec
from kvwise.core.weights import weight_bytes_per_rank
from kvwise.planner.defaults import VersionRules, parse_version, quant_for
from kvwise.planner.result import ResolvedFlags

# --- activation peak of the profile run -------------------------------------------------------
# V1 (0.8+): least-squares fit on the vLLM 0.19 H100 sweep (llm-d-planner PR #205 logs: Qwen2.5-7B
# TP1/TP4, Llama-3.1-8B TP1/TP2, phi-4, granite-3.1-8b, Qwen2.5-72B TP2, Llama-3.3-70B TP2; all
# max_num_seqs 1024, max_num_batched_tokens 8192). Residuals <= 0.02 GiB; gpt-oss-20b (held
# out of the fit) is predicted at 2.85 vs 2.87 GiB logged.
V1_ACTIVATION_BASE_BYTES = 122_000_000  # runner buffers and workspaces independent of the shapes
V1_HIDDEN_BYTES_PER_DTYPE_BYTE = 1.1  # x dtype bytes per token x hidden: ~one [MNBT, hidden] tensor
# The sampler term's bytes per (request x vocab) depend on the release: see the version rules
# (`sampler_bytes_per_logit`: 27 while the sampler sorted the vocabulary, 14 with Triton top-k/p);
# from 0.10.2 on FlashInfer-capable cards the V1 runner's FlashInfer figure (v1_sampler_bytes_per_logit).
# V0 (0.4-0.7): the profile run (worker/model_runner.py:profile_run) pushes max_num_batched_tokens
# tokens through the model. Its peak is at the MLP's down_proj output, where the decoder layer
# holds, per token: the residual and the normed input [hidden] x 2, gate_up [2 x intermediate],
# the activation output [intermediate] and down_proj's output [hidden]: 3 x intermediate
# + 3 x hidden (gate_up is [intermediate] without a gated MLP). This matches vllm#10517's three
# 0.6.4 runs to 0.01 GiB (Llama-3.1-8B, RTX 3090: 2.06/2.99/0.05 GiB for 20k/29k/512 tokens vs
# 2.07/2.99/0.06 logged). The forward's tensors are freed before the sampler runs, so the peak is
# the larger of the two. The sampler (SamplingParams top_p 0.99, top_k vocab - 1) sorts
# min(max_num_seqs, tokens) x vocab logits in fp32 with int64 indices; its bytes per logit are the
# release rules' `sampler_bytes_per_logit` (41, fitted on vllm PR #10511: 1.26 GiB for 256 x
# 128,256 with an 8192-token forward of 0.84 GiB; sampler.py:_apply_top_k_top_p keeps ~40-48
# bytes alive). With chunked prefill no sampler peak shows (vllm#10517 at 35k: 0.06 GiB;
# vllm#13061 at 131k: 0.19 GiB for a 0.14 GiB forward), so none is charged.
# MoE: the fused-MoE layer's buffers (planner/moe_memory.py): the persistent workspace adds to
# the peak, the kernel's own per-call buffers only compete with the sampler.

# --- non-torch memory charged to the budget ------------------------------------------------------
# Per-instance accounting (V0 0.4-0.6.3 and 0.6.5+, V1 0.9.1+): V1 "non-torch forward increase"
# is 0.24-0.27 GiB at TP1 in the 0.19 sweep; V0 at TP2 on RTX 4090s (no P2P, custom all-reduce
# off) logs 0.25 GiB (vllm#13061). Fit on those logs: one figure for both engines.
NON_TORCH_BYTES = int(0.25 * GIB)
# The same figure, logged by vLLM ("non-torch forward increase", memory_profiling's
# non_torch_increase) on one card below Hopper (compute capability < 9.0) with nothing else in
# the process group (TP1, PP1): 0.04-0.06 GiB on five cards from five sources (Tesla T4 0.8.2
# V0, e-hfcookbook; A10G 0.8.1 V0, f-vllm15360; RTX A6000 0.8.3 V0, f-vllm16141; RTX 2060 12GB,
# d-q07k; RTX 4080 under WSL2 0.26.0 V1, c-kvcachelab), where the Hopper logs give 0.13-0.14
# (H100, 0.11.0, e-llmdbench) and 0.24-0.27 (H100, 0.19 sweep). Fit: 0.06 GiB, the largest of the
# five (leaving any one source out keeps it within 0.04-0.06). Applied where vLLM charges that
# increase itself: per-instance memory_profiling from 0.6.5 (V0 `worker/worker.py`
# determine_num_available_blocks, V1 0.9.1+ `v1/worker/gpu_worker.py:determine_available_memory`)
# up to 0.26. Not before 0.6.5 (the charged figure is the free-memory drop over the profile,
# which holds the caching allocator's reserved segments), not from 0.27.0 (the charge is
# `total_consumed`, the free memory lost since the snapshot, where no log separates non-torch
# memory from unreleased cache segments and a first start's compile), not at TP or PP > 1 (NCCL's
# communicator memory is non-torch too: vllm#13061 logs 0.25 GiB at TP2 on RTX 4090s), and not on
# Hopper or later (no log below 0.13 GiB there; Blackwell has no log and keeps 0.25).
PRE_HOPPER_TP1_NON_TORCH_BYTES = int(0.06 * GIB)
PRE_HOPPER_NON_TORCH_RELEASES = ((0, 6, 5), (0, 27, 0))  # [since, until)
# Global accounting (V0 0.6.4, V1 0.8.0-0.9.0: util caps everything on the device) charges the
# CUDA context and every other process too: vllm#10517 logs 0.35 GiB with nothing else running.
GLOBAL_NON_TORCH_BYTES = int(0.35 * GIB)
# TP >= 2 on NVSwitch Hopper/Blackwell (H100/H200 SXM, B200): 2.06-2.13 GiB per GPU in the 0.19
# H100 sweep (TP2, TP4), 1.85 GiB above TP1. Attributed to NCCL's NVLink SHARP (NVLS) buffers,
# which NCCL sets up only on NVSwitch systems of compute capability 9.0+ (NCCL docs,
# NCCL_NVLS_ENABLE), so A100 NVLink, H100 NVL bridges and PCIe cards are charged the custom
# all-reduce buffers only. No A100 NVLink TP > 1 log has been available to check that side.
NVLS_EXTRA_BYTES = int(1.85 * GIB)
NVSWITCH_MIN_BYTES_S = 450e9  # HGX NVSwitch boards: 450 GB/s per direction and up
NVLINK_MIN_BYTES_S = 100e9  # interconnects at least this fast are NVLink-class
# Custom all-reduce (vllm/distributed/device_communicators/custom_all_reduce.py, 0.4.0-0.33.0,
# CustomAllreduce.__init__): meta (8 MiB + meta_size) + an 8 MiB IPC buffer + 8 MiB rank_data.
# Enabled (init_custom_ar / CustomAllreduce checks) for world sizes 2, 4, 6, 8 with GPU P2P, and
# above 2 only with full NVLink.
CUSTOM_ALL_REDUCE_BYTES = 3 * 8 * 1024 * 1024
CUSTOM_ALL_REDUCE_WORLD_SIZES = (2, 4, 6, 8)
# Model Runner V2 keeps int32 penalty counts for every running slot:
# int32[max_num_seqs, vocab] (vllm/v1/worker/gpu/sample/penalties.py, 0.22+), consumed memory.
V2_PENALTY_BYTES_PER_LOGIT = 4

# --- CUDA context: before vLLM's memory snapshot, outside the budget -------------------------------
# The worker's MemorySnapshot / init_gpu_memory (mem_get_info after torch.cuda.set_device) is
# taken once the process's CUDA context exists, so the context is never inside the budget. Its
# size is a fit: vllm#10517 (0.6.4, RTX 3090, global accounting) charges 0.35 GiB of non-torch
# memory with nothing else on the card, cuBLAS workspaces included. kvwise adds a 0.15 GiB
# margin to that one measurement (contexts vary with driver, CUDA and card): a margin, not a fit.
CUDA_CONTEXT_BYTES = int(0.5 * GIB)

# --- CUDA graphs ---------------------------------------------------------------------------------------
# Actual capture ("Graph capturing finished ... took X GiB") in the 0.19 sweep: 0.64-1.84 GiB for
# 51 piecewise + 51 full graphs. It follows the hidden size (buffers of the largest captured batch)
# better than the layer count: least squares over the eight dense runs gives residuals <= 0.11 GiB
# (gemma-3-27b 1.16 vs 1.14, Llama-3.3-70B TP2 1.68 vs 1.79). Scaled by the number of graphs: V0
# vllm PR #11349 (Llama-3.2-1B, 35 graphs) is predicted at 0.19 vs 0.21 GiB.
GRAPH_FIXED_BYTES = 0.166 * GIB
GRAPH_PER_1K_HIDDEN_BYTES = 0.185 * GIB
REFERENCE_NUM_GRAPHS = 102
# MoE: Qwen3-30B-A3B 1.41 GiB vs 0.54 for its dense shapes (102 graphs). Charged once, not per
# graph: gpt-oss-20b (0.19, 166 graphs from GptOssForCausalLMConfig's capture list) logs 1.84 GiB,
# 2.04 predicted this way and 2.60 if the extra grew with the count. How it depends on the count
# and on the largest captured batch is not modelled (two logs, in-sample).
MOE_GRAPH_EXTRA_BYTES = 0.9 * GIB
# Vision encoders are profiled with dummy images too: gemma-3-27b-it logs 3.99 GiB of activation
# where its text shapes give 3.70.
VISION_PROFILE_BYTES = 0.3 * GIB
# vLLM's pre-capture estimate is below the actual at TP1 (0.61 vs 0.87 GiB for Qwen2.5-7B, 1.30 vs
# 1.84 for gpt-oss-20b, 1.05 vs 1.14 for gemma-3-27b): about 80 % of it.
GRAPH_ESTIMATE_FRACTION = 0.8
# Sampler warm-up after the KV pool is allocated: a transient of ~9 bytes per logit must fit in
# what is left outside the budget (gpt-oss-20b at 0.95 on H100 failed with 1.6 GiB left for a
# 1024 x 201,088 logit warm-up; gemma-3-27b started with 2.3 GiB left for 1024 x 262,208).
# Scaled with the release's sampler cost: 9 of the 14 bytes per logit of the 0.19 profile. This
# share is the V1 runner's fit only: Model Runner V2's warm-up is sized from source (below).
WARMUP_SHARE_OF_SAMPLER = 9.0 / 14.0
# Model Runner V2 (0.22+): vLLM runs no check before the warm-up; warmup_kernels (after the KV
# pool and the graph capture, v1/worker/gpu_worker.py:compile_or_warm_up_model) simply allocates,
# and fails when its tensors exceed the device's free memory. That free memory follows from the
# budget arithmetic (v0.27.0+ utils/mem_utils.py:memory_profiling and
# v1/worker/gpu_worker.py:determine_available_memory): the pool is requested - total_consumed -
# transient_peak_headroom, and total_consumed is the free memory lost since the snapshot, so once
# the pool is allocated the device has snapshot free - requested + transient_peak_headroom free:
# the profile's transient peak is inside the budget but was released by memory_profiling's
# empty_cache() (0.22-0.26: torch_peak_increase, the same transient plus what the profile kept).
# So the whole V2 warm-up transient read from source must fit in free - budget - graph pool +
# the released profile peak; no share of it is fitted.
# Model Runner V2 (0.22+) samples with its own Sampler (vllm/v1/worker/gpu/sample/sampler.py), read
# from source: the [rows, vocab] tensors alive at its peak are named per release in the rules
# (`v2_profile_sampler_tensors`, `v2_warmup_sampler_tensors`); bytes per logit of each (None: the
# model's dtype). "logits": compute_logits' output in the model dtype; "fp32_copy":
# apply_sampling_params' torch.empty_like(logits, dtype=float32).copy_(logits) (0.27+: only when a
# slot needs processing, Sampler._requires_logits_processing / needs_logits_processing; the
# profile's dummy batch runs on slots with no request, whose initial states need none, so the
# 0.27+ profile holds the logits alone; the warm-up's requests do need it); "logits_clone"
# (0.26): logits.clone() kept for raw logprobs; with top-k and top-p both set (the warm-up),
# flashinfer_sample -> flashinfer.sampling.top_k_top_p_sampling_from_logits holds
# "flashinfer_masked_logits" (top_k_mask_logits' copy) and "flashinfer_probs" (its softmax), both
# fp32, and 0.26 first casts the logits to fp32 ("flashinfer_fp32_cast"). Everything else
# (penalties, bias, bad words, gumbel_sample's [rows, vocab / 1024] maxima,
# compute_token_logprobs) works in place or per row.
V2_SAMPLER_TENSOR_BYTES: dict[str, int | None] = {
    "logits": None,
    "fp32_copy": 4,
    "logits_clone": None,
    "flashinfer_fp32_cast": 4,
    "flashinfer_masked_logits": 4,
    "flashinfer_probs": 4,
}
# Without FlashInfer, apply_top_k_top_p_triton (batch >= 8) caches an fp32 [p, vocab] buffer with
# p = min(next power of 2 of min(num SMs, rows), num SMs); the SM count is not in the GPU catalog:
# 128 (RTX 4090; H100 SXM has 132, A100 108, L4 58) is assumed.
TRITON_TOPK_MIN_ROWS = 8
ASSUMED_NUM_SMS = 128
# Logits at TP > 1 (V1 engine): LogitsProcessor._get_logits computes this rank's [rows, vocab / TP]
# slice and all-gathers it along the vocab (`use_all_gather()` is True on CUDA). The all-gather
# (device_communicators/cuda_communicator.py:CudaCommunicator.all_gather, the base class's
# all_gather likewise) allocates a [TP x rows, vocab / TP] output, and for dim != 0 its
# reshape(movedim(...)) copies it into a new [rows, vocab] tensor while the gathered buffer and
# the local slice are still referenced: (2 + 1/TP) x rows x vocab in the model dtype at that
# moment (read at 0.19.0, 0.28.0, 0.30.0). The sampler then starts from the [rows, vocab] copy,
# so the logits stage peaks at the larger of the two. It shows where the sampler's own tensors
# are below it: Model Runner V2's profile from 0.26 (the logits alone).
LOGITS_GATHER_FULL_COPIES = 2


# M-RoPE models whose cos/sin cache vLLM sizes at 4 x max_position_embeddings
# (model_executor/layers/rotary_embedding.py, 0.11+ rotary_embedding/mrope.py: MRotaryEmbedding
# `cache_max_position_num`, read at 0.8.5, 0.9.0.1, 0.10.1, 0.11.0, 0.14.0, 0.19.0, 0.27.1, 0.30.0)
MROPE_ARCHITECTURES = ("Qwen2_5_VLForConditionalGeneration",)


def mrope_cache_factor(model: ModelSpec) -> int:
    return 4 if model.architecture in MROPE_ARCHITECTURES else 1


def _moe_profile_bytes(
    model: ModelSpec, gpu: GpuSpec, resolved: ResolvedFlags, rules: VersionRules
) -> tuple[float, float]:
    """(persistent, transient) bytes of the fused-MoE layer in the profile run
    (planner/moe_memory.py, imported for MoE models only: a dense model has none)."""
    if model.moe is None:
        return 0.0, 0.0
    from kvwise.planner.moe_memory import moe_profile_bytes

    moe = moe_profile_bytes(model, gpu, resolved, rules)
    return moe.persistent, moe.transient


def runtime_dtype_bytes(resolved: ResolvedFlags) -> int:
    return DTYPE_BYTES[resolved.dtype]


# bitsandbytes 4-bit with nested ("double") quantization of the absmax: vLLM 0.10.0+ dequantizes
# the nested absmax to one fp32 per 64 weights at load (`bitsandbytes_loader.py:_dequantize_dq`);
# through 0.9.2 the state is kept nested, one uint8 absmax per 64 weights (bitsandbytes'
# `quantize_4bit(compress_statistics=True)`, which vLLM's in-flight quantization always passes:
# 0.5.0 `model_loader/loader.py:BitsAndBytesModelLoader`, 0.9.2 `bitsandbytes_loader.py`). The
# nested level's own fp32 absmax (one per 256 blocks) and code table are under 0.03 % of the
# weights and not counted. Read at 0.5.0.post1, 0.8.5, 0.9.0.1, 0.9.2, 0.10.0, 0.10.1, 0.11.0.
BNB_ABSMAX_DEQUANTIZED_SINCE = (0, 10, 0)


def _release_quant(model: ModelSpec, quant: QuantSpec | None, rules: VersionRules | None) -> Any:
    if rules is None or quant is None or quant.method != "bitsandbytes" or quant.bits != 4:
        return quant
    nested = model.quant is None or "double-quant" in quant.scheme  # in-flight, or the checkpoint's
    if nested and parse_version(rules.version) < BNB_ABSMAX_DEQUANTIZED_SINCE:
        return replace(quant, scale_bytes=1)
    return quant


def weights_bytes(
    model: ModelSpec, resolved: ResolvedFlags, rules: VersionRules | None = None
) -> int:
    """The weights vLLM holds per rank; `rules` (the release) decides bitsandbytes' absmax."""
    quant = _release_quant(model, quant_for(model, resolved), rules)
    weights = weight_bytes_per_rank(
        model,
        tp=resolved.tensor_parallel_size,
        pp=resolved.pipeline_parallel_size,
        dtype_bytes=runtime_dtype_bytes(resolved),
        quant=quant,
        rotary_cache_len=model.max_position_embeddings * mrope_cache_factor(model),
    )
    # --cpu-offload-gb moves that many GiB of weights per GPU to (UVA-mapped) host memory
    return max(0, weights - int(resolved.cpu_offload_gb * GIB))


def _sampler_rows(resolved: ResolvedFlags) -> int:
    # the dummy batch has min(max_num_seqs, max_num_batched_tokens) requests
    return min(resolved.max_num_seqs, resolved.max_num_batched_tokens)


def logits_gather_bytes_per_logit(resolved: ResolvedFlags) -> float:
    """Bytes per logit alive while compute_logits all-gathers the vocab slices (0 at TP 1)."""
    tp = resolved.tensor_parallel_size
    if tp == 1:
        return 0.0
    return (LOGITS_GATHER_FULL_COPIES + 1 / tp) * runtime_dtype_bytes(resolved)


def _mlp_transient_bytes(model: ModelSpec, resolved: ResolvedFlags) -> float:
    inter = model.intermediate_size / resolved.tensor_parallel_size
    # gate/up output [MNBT, 2 x I] and the activation output [MNBT, I]
    return resolved.max_num_batched_tokens * 3 * inter * runtime_dtype_bytes(resolved)


def activation_bytes(
    model: ModelSpec, gpu: GpuSpec, resolved: ResolvedFlags, rules: VersionRules
) -> int:
    """Transient peak of the profile run above what stays allocated ("torch peak increase")."""
    dtype_bytes = runtime_dtype_bytes(resolved)
    moe_persistent, moe_transient = _moe_profile_bytes(model, gpu, resolved, rules)
    tokens = resolved.max_num_batched_tokens
    logits = _sampler_rows(resolved) * model.vocab_size
    if rules.engine == "V0":
        inter = model.intermediate_size / resolved.tensor_parallel_size
        mlp_in = (2 if model.gated_mlp else 1) * inter  # gate_up (or up) projection output
        forward = tokens * (mlp_in + inter + 3 * model.hidden_size) * dtype_bytes
        sampler = 0.0 if resolved.enable_chunked_prefill else rules.sampler_bytes_per_logit * logits
        return int(max(forward, sampler, moe_transient) + moe_persistent)
    hidden = V1_HIDDEN_BYTES_PER_DTYPE_BYTE * dtype_bytes * tokens * model.hidden_size
    if uses_v2_runner(model, rules):
        sampler = _v2_bytes_per_logit(rules.v2_profile_sampler_tensors, dtype_bytes) * logits
    else:
        sampler = v1_sampler_bytes_per_logit(gpu, resolved, rules) * logits
    # the logits stage: the all-gather at TP > 1, then the sampler on the gathered logits
    sampler = max(sampler, logits_gather_bytes_per_logit(resolved) * logits)
    peak = max(sampler, _mlp_transient_bytes(model, resolved), moe_transient)
    if model.vision is not None and model.vision.encoder is not None:
        # the encoder pass, then the language model's batch beside the encoder cache
        from kvwise.planner.vision_profile import encoder_profile  # for such models only

        enc = encoder_profile(model, resolved, rules)
        language = hidden + peak + enc.cache_bytes
        return int(V1_ACTIVATION_BASE_BYTES + max(language, enc.peak_bytes) + moe_persistent)
    vision = VISION_PROFILE_BYTES if model.vision else 0.0
    return int(V1_ACTIVATION_BASE_BYTES + hidden + peak + vision + moe_persistent)


def uses_v2_runner(model: ModelSpec, rules: VersionRules) -> bool:
    """Whether the release runs this model on Model Runner V2 by default
    (vllm/config/vllm.py: VllmConfig.use_v2_model_runner, _is_default_v2_model_runner_model)."""
    listed = model.architecture in rules.v2_runner_archs
    dense = model.moe is None
    if rules.v2_runner == "listed_dense_unquantized":  # 0.22-0.23
        return listed and dense and model.quant is None
    if rules.v2_runner == "listed":  # 0.24
        return listed
    if rules.v2_runner == "listed_or_dense":  # 0.25-0.28: hybrid models stay on V1's runner
        return (listed or dense) and not model.is_hybrid
    return rules.v2_runner == "all"  # 0.29+


def graph_estimate_in_budget(model: ModelSpec, rules: VersionRules) -> bool:
    """Whether the release deducts its CUDA-graph estimate from the budget for this model
    (gpu_worker.py:determine_available_memory with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS at
    its default; Model Runner V2's profile_cudagraph_memory returns 0 before 0.29)."""
    if not rules.cuda_graph_in_budget:
        return False
    return rules.graph_estimate_in_v2_runner or not uses_v2_runner(model, rules)


def _has_p2p(gpu: GpuSpec) -> bool:
    # GeForce cards have GPU peer-to-peer disabled by the driver unless bridged by NVLink
    is_geforce = re.search(r"\bRTX \d{4}\b|GEFORCE|TITAN", gpu.name.upper()) is not None
    return gpu.interconnect_bytes_s >= NVLINK_MIN_BYTES_S or not is_geforce


def custom_all_reduce_bytes(gpu: GpuSpec, tp: int) -> int:
    """The custom all-reduce's buffers on each GPU, when vLLM enables it for this set-up."""
    if tp not in CUSTOM_ALL_REDUCE_WORLD_SIZES or not _has_p2p(gpu):
        return 0
    if tp > 2 and gpu.interconnect_bytes_s < NVLINK_MIN_BYTES_S:
        return 0  # "not supported on more than two PCIe-only GPUs"
    return CUSTOM_ALL_REDUCE_BYTES


def _multi_gpu_bytes(gpu: GpuSpec, tp: int, rules: VersionRules) -> int:
    if tp == 1:
        return 0
    is_nvswitch_hopper = (
        gpu.interconnect_bytes_s >= NVSWITCH_MIN_BYTES_S and float(gpu.compute_capability) >= 9.0
    )
    if is_nvswitch_hopper:
        return NVLS_EXTRA_BYTES  # the 0.19 sweep's figure: allocated after the snapshot
    if rules.distributed_init_before_snapshot:
        return 0  # 0.11+: the custom all-reduce is set up before the snapshot, outside the budget
    return custom_all_reduce_bytes(gpu, tp)


# Where the custom all-reduce is off at TP > 1 (PCIe beyond two GPUs, no GPU P2P), the
# all-reduces captured in the graphs go through NCCL (distributed/parallel_state.py:
# GroupCoordinator.graph_capture: only the custom all-reduce gets a capture context of its own),
# and what NCCL allocates for captured collectives is NCCL's, not in vLLM's source. kvwise's
# graph figure is fitted at TP1 and on NVSwitch H100s (custom all-reduce on), so at TP >= 4
# without the custom all-reduce the capture verdict is not modelled, however much room is left:
# V0's own message (worker/model_runner.py:ModelRunner.capture_model, 0.4.0-0.6.3: "CUDA graphs
# can take additional 1~3 GiB memory per GPU") is no bound there. Qwen3-30B-A3B at TP 4 on four
# A10s (QwenLM/Qwen3#1387, out-of-sample a-c) had about 6 GiB beside a 0.7 budget and died after
# capture holding 6.1 GiB outside PyTorch (21.94 GiB in use, 15.84 GiB PyTorch's), its CUDA-graph
# pools 36 MiB: the sampler warm-up's [256, vocab] fp32 tensor (150 MiB) no longer fitted.
# Two GPUs are left out: two GeForce cards without P2P start with far less room beside the budget
# (the in-sample vllm#28228, 2x RTX 3090 at 0.95 with NCCL in the graphs, about 1.2 GiB left).
NCCL_GRAPH_MIN_TP = 4


def nccl_graph_capture_not_modelled(
    gpu: GpuSpec, resolved: ResolvedFlags, graphs_excess: int, room: int
) -> str | None:
    """'not modelled: …' when the capture verdict (and the warm-up after it) hangs on NCCL's
    memory in the graphs."""
    tp = resolved.tensor_parallel_size
    if resolved.enforce_eager or tp < NCCL_GRAPH_MIN_TP or custom_all_reduce_bytes(gpu, tp) > 0:
        return None
    if graphs_excess > room:
        return None  # out of memory with the graphs alone
    return (
        f"not modelled: CUDA-graph capture at TP {tp} without the custom all-reduce (NCCL's "
        f"memory for the all-reduces captured in the graphs, which vLLM does not bound: it can "
        f"exceed the 1~3 GiB per GPU vLLM's V0 names) and the sampler warm-up after it; "
        f"{room / GIB:.2f} GiB is left beside the budget"
    )


# v1/worker/gpu_worker.py:determine_available_memory runs profile_run() inside memory_profiling,
# and that first forward is where compilation/decorators.py compiles the model unless
# _try_load_aot_compiled_fn finds its artifact on disk (read at 0.20.0, 0.26.0, 0.28.0): a cold
# compile's allocations are charged to the budget. Their size is Inductor's and Triton's, not
# vLLM's (vllm#54383, #54122)
COLD_COMPILE_NOT_MODELLED = (
    "a first start of these flags (empty torch.compile cache) compiles inside vLLM's memory "
    "profile and can get less KV cache than a restart (vllm#54383); that memory is not sized"
)
NCCL_INIT_NOT_MODELLED = (
    "NCCL communicator memory set up before vLLM's memory snapshot (0.11+, "
    "init_worker_distributed_environment): it lowers the free memory at the start-up check and "
    "the room for CUDA graphs and the sampler warm-up, outside the budget"
)


UNOFFICIAL_BUILD_NOT_MODELLED = (
    "a community or patched-source build for compute capability 6.x: which attention backend and "
    "kernels it runs, their workspace memory, and whether CUDA graphs capture there (kvwise "
    "sizes them as the official engine's)"
)


def setup_not_modelled(
    gpu: GpuSpec, resolved: ResolvedFlags, rules: VersionRules
) -> tuple[str, ...]:
    """Parts of this set-up's start-up memory kvwise does not size."""
    out: tuple[str, ...] = ()
    if not gpu.has_official_vllm_build:
        out += (UNOFFICIAL_BUILD_NOT_MODELLED,)
    is_multi_gpu = resolved.tensor_parallel_size * resolved.pipeline_parallel_size > 1
    if is_multi_gpu and rules.distributed_init_before_snapshot:
        out += (NCCL_INIT_NOT_MODELLED,)
    if rules.engine == "V1" and not resolved.enforce_eager:
        out += (COLD_COMPILE_NOT_MODELLED,)
    return out


def before_snapshot_bytes(gpu: GpuSpec, resolved: ResolvedFlags, rules: VersionRules) -> int:
    """Device memory vLLM 0.11+ takes between the CUDA context and its memory snapshot
    (init_worker_distributed_environment): it lowers "free" at the start-up check and the room
    outside the budget, and is not charged to the budget. Only the custom all-reduce's buffers
    are counted; NCCL's communicator memory is named as not modelled."""
    if not rules.distributed_init_before_snapshot:
        return 0
    return custom_all_reduce_bytes(gpu, resolved.tensor_parallel_size)


def per_instance_non_torch_bytes(gpu: GpuSpec, resolved: ResolvedFlags, rules: VersionRules) -> int:
    """The process's own non-torch growth over vLLM's memory profile (per-instance accounting),
    before what a multi-GPU set-up adds."""
    since, until = PRE_HOPPER_NON_TORCH_RELEASES
    is_single_gpu = resolved.tensor_parallel_size * resolved.pipeline_parallel_size == 1
    is_pre_hopper = not gpu.is_rocm and float(gpu.compute_capability) < 9.0
    if is_single_gpu and is_pre_hopper and since <= parse_version(rules.version) < until:
        return PRE_HOPPER_TP1_NON_TORCH_BYTES
    return NON_TORCH_BYTES


def non_torch_bytes(
    model: ModelSpec, gpu: GpuSpec, resolved: ResolvedFlags, rules: VersionRules
) -> int:
    """Memory charged to the budget besides weights and the activation peak."""
    if rules.accounting == "global":
        # the CUDA context and memory held by other processes count against the budget
        others = gpu.memory_bytes - gpu.free_bytes if gpu.free_bytes is not None else 0
        charged = GLOBAL_NON_TORCH_BYTES + others
    else:
        charged = per_instance_non_torch_bytes(gpu, resolved, rules)
    charged += _multi_gpu_bytes(gpu, resolved.tensor_parallel_size, rules)
    if uses_v2_runner(model, rules):
        charged += V2_PENALTY_BYTES_PER_LOGIT * resolved.max_num_seqs * model.vocab_size
    return charged


def _gpt_oss_capture_sizes(resolved: ResolvedFlags, rules: VersionRules) -> list[int]:
    # GptOssForCausalLMConfig (0.10.1+): [1, 2, 4] + steps of 8 below 256 + steps of 16 up to
    # its largest size, which only max_num_batched_tokens caps (config/vllm.py)
    max_cap = min(rules.gpt_oss_max_capture_size, resolved.max_num_batched_tokens)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, rules.gpt_oss_max_capture_size + 1, 16)]
    return [s for s in sizes if s <= max_cap]


def capture_sizes(model: ModelSpec, resolved: ResolvedFlags, rules: VersionRules) -> list[int]:
    """Batch sizes vLLM captures CUDA graphs for (empty with --enforce-eager)."""
    if resolved.enforce_eager:
        return []
    if model.architecture == "GptOssForCausalLM" and rules.gpt_oss_max_capture_size:
        return _gpt_oss_capture_sizes(resolved, rules)
    if rules.cuda_graph_sizes == "v0":
        # V0: [1, 2, 4] + multiples of 8 up to the smallest candidate >= max_num_seqs (256 max)
        limit = min(256, -(-resolved.max_num_seqs // 8) * 8) if resolved.max_num_seqs > 4 else 4
        return [s for s in (1, 2, 4, *range(8, 257, 8)) if s <= limit]
    if rules.cuda_graph_sizes == "v1_step8_512":
        max_cap = min(512, resolved.max_num_batched_tokens)
    else:
        max_cap = min(resolved.max_num_seqs * 2, 512, resolved.max_num_batched_tokens)
    if rules.cuda_graph_sizes == "v1_step16":
        sizes = [1, 2, 4, *range(8, min(max_cap + 1, 256), 8), *range(256, max_cap + 1, 16)]
    else:
        sizes = [1, 2, 4, *range(8, max_cap + 1, 8)]
    return [s for s in sizes if s <= max_cap]


def num_graphs(model: ModelSpec, resolved: ResolvedFlags, rules: VersionRules) -> int:
    sizes = capture_sizes(model, resolved, rules)
    if rules.cudagraph_mode == "piecewise":
        return len(sizes)
    # FULL_AND_PIECEWISE: a piecewise graph per size and a full graph per uniform-decode size
    return len(sizes) + sum(1 for s in sizes if s <= resolved.max_num_seqs)


def cuda_graph_bytes(model: ModelSpec, resolved: ResolvedFlags, rules: VersionRules) -> int:
    """Memory the graph pool takes when captured (0 with --enforce-eager)."""
    count = num_graphs(model, resolved, rules)
    if count == 0:
        return 0
    per_hidden = GRAPH_PER_1K_HIDDEN_BYTES * model.hidden_size / 1000
    moe = MOE_GRAPH_EXTRA_BYTES if model.moe else 0.0  # once, whatever the count (see above)
    return int((GRAPH_FIXED_BYTES + per_hidden) * count / REFERENCE_NUM_GRAPHS + moe)


def _v2_bytes_per_logit(tensors: tuple[str, ...], dtype_bytes: int) -> int:
    sizes = (V2_SAMPLER_TENSOR_BYTES[name] for name in tensors)
    return sum(dtype_bytes if size is None else size for size in sizes)


def _has_flashinfer_sampler(gpu: GpuSpec) -> bool:
    # v1/sample/ops/topk_topp_sampler.py:flashinfer_sampler_supported: CUDA, capability 7.5-12.1
    return not gpu.is_rocm and 7.5 <= float(gpu.compute_capability) <= 12.1


# V1 runner with FlashInfer (0.10.2-0.11.0, read at 0.10.2 and 0.11.0; from 0.11.1 FlashInfer is opt-in,
# VLLM_USE_FLASHINFER_SAMPLER=1, and the rules' `v1_flashinfer_sampler` is off): _dummy_sampler_run's top-k and
# top-p go to flashinfer.sampling.top_k_top_p_sampling_from_logits (v1/sample/ops/
# topk_topp_sampler.py:flashinfer_sample), which keeps top_k_mask_logits' masked copy and its softmax
# alive beside Sampler.forward's fp32 copy and the model-dtype logits: dtype + 3 x 4 bytes per logit
# (14 in bf16, the figure the 0.19 H100 logs give; gpt-oss-120b at 0.10.2 on one H100 SXM then keeps
# ~33k KV tokens, GPUStack's 32k-prompt run served one request at a time). Without FlashInfer (a pip
# install without the [flashinfer] extra) the PyTorch sort of `sampler_bytes_per_logit` applies.
FLASHINFER_SAMPLER_FP32_TENSORS = 3


def v1_sampler_bytes_per_logit(gpu: GpuSpec, resolved: ResolvedFlags, rules: VersionRules) -> float:
    """Bytes per (request x vocab) alive at the V1 runner's dummy sampler peak."""
    if rules.v1_flashinfer_sampler and _has_flashinfer_sampler(gpu):
        return runtime_dtype_bytes(resolved) + 4 * FLASHINFER_SAMPLER_FP32_TENSORS
    return rules.sampler_bytes_per_logit


def _v2_warmup_bytes(
    model: ModelSpec,
    gpu: GpuSpec,
    resolved: ResolvedFlags,
    rules: VersionRules,
    num_gpu_blocks: int,
) -> int:
    # warmup_kernels: min(max_num_seqs, MNBT // prompt_len 2, (blocks - 1) // blocks per request)
    rows = min(
        resolved.max_num_seqs, resolved.max_num_batched_tokens // 2, max(1, num_gpu_blocks - 1)
    )
    tensors = rules.v2_warmup_sampler_tensors
    if not _has_flashinfer_sampler(gpu):
        tensors = tuple(t for t in tensors if not t.startswith("flashinfer_"))
    per_logit = _v2_bytes_per_logit(tensors, runtime_dtype_bytes(resolved))
    triton_rows = 0
    if not any(t.startswith("flashinfer_") for t in tensors) and rows >= TRITON_TOPK_MIN_ROWS:
        # apply_top_k_top_p_triton's per-program buffer, first allocated here and kept
        triton_rows = min(1 << (min(rows, ASSUMED_NUM_SMS) - 1).bit_length(), ASSUMED_NUM_SMS)
    # every tensor alive at the warm-up sampler's peak (see V2_SAMPLER_TENSOR_BYTES), or the
    # logits' all-gather before it at TP > 1 if that is larger
    peak_per_logit = max(per_logit, logits_gather_bytes_per_logit(resolved))
    return int(peak_per_logit * rows * model.vocab_size + 4 * triton_rows * model.vocab_size)


def warmup_bytes(
    model: ModelSpec,
    gpu: GpuSpec,
    resolved: ResolvedFlags,
    rules: VersionRules,
    num_gpu_blocks: int,
) -> int:
    """Transient the sampler warm-up needs after the KV pool is allocated (V1 runner: the
    fitted share that must fit beside the budget; Model Runner V2: all of it, to fit beside the
    budget plus the released profile peak, `released_profile_peak_bytes`)."""
    if uses_v2_runner(model, rules):
        return _v2_warmup_bytes(model, gpu, resolved, rules, num_gpu_blocks)
    per_logit = WARMUP_SHARE_OF_SAMPLER * v1_sampler_bytes_per_logit(gpu, resolved, rules)
    return int(per_logit * _sampler_rows(resolved) * model.vocab_size)


def released_profile_peak_bytes(
    model: ModelSpec, gpu: GpuSpec, resolved: ResolvedFlags, rules: VersionRules
) -> int:
    """The profile run's transient peak: charged to the budget, but freed and released (by
    memory_profiling's empty_cache) before the KV pool is allocated, so free on the device again
    at the warm-up. What the profile keeps is not released: the fused-MoE workspace
    (WorkspaceManager) and the V1 base, taken as persistent runner buffers."""
    if rules.engine == "V0":
        return 0
    moe_persistent, _ = _moe_profile_bytes(model, gpu, resolved, rules)
    kept = V1_ACTIVATION_BASE_BYTES + moe_persistent
    return max(0, int(activation_bytes(model, gpu, resolved, rules) - kept))
