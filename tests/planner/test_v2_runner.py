"""Model Runner V2's (vLLM 0.22+) profile-run sampler and its warmup_kernels warm-up, per release.

Expected figures are counted from vLLM's source, tensor by tensor (vllm/v1/worker/gpu/...), not
taken from kvwise's output.
"""

from __future__ import annotations

import pytest

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.planner import Plan, plan
from kvwise.planner.defaults import engine_rules, rules_for
from kvwise.planner.memory import warmup_bytes
from kvwise.planner.plan import resolve_flags

LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_VOCAB = 128_256


def _plan(version: str, gpu: str = "h100 sxm", **flags: object) -> Plan:
    return plan(
        load_model(LLAMA8),
        find_gpu(gpu),
        VllmFlags(max_model_len=8192, **flags),  # type: ignore[arg-type]
        vllm_version=version,
    )


def test_v2_profile_sampler_skips_top_k_top_p_and_costs_logits_plus_an_fp32_copy() -> None:
    # 0.21: V1 runner, 14 bytes per logit (Triton top-k/top-p in the dummy sampler run);
    # 0.23: Llama on V2, whose dummy batch has top_k = vocab, top_p = 1 and no logprobs, so only
    # the bf16 logits (2) and apply_sampling_params' fp32 copy (4) are alive: 6 bytes per logit.
    # H100: max_num_seqs 1024, max_num_batched_tokens 8192; the sampler is the larger transient.
    v1, v2 = _plan("0.21.0"), _plan("0.23.0")
    expected_drop = (14 - 6) * 1024 * LLAMA_VOCAB
    drop = v1.memory.activation_peak_bytes - v2.memory.activation_peak_bytes
    assert abs(drop - expected_drop) <= 1
    assert v2.kv.tokens > v1.kv.tokens  # the lighter profile leaves more KV cache


def test_0_26_profile_sampler_works_in_the_logits_dtype_in_place() -> None:
    # 0.26's apply_sampling_params drops the fp32 copy (clones only for raw logprobs): 2 bytes
    # per logit, 4 fewer than 0.25. With 2048 batched tokens the MLP's transient
    # (2048 x 3 x 14,336 x 2 bytes = 0.16 GiB) stays below even the 2-byte sampler (0.24 GiB).
    v25, v26 = (_plan(v, max_num_batched_tokens=2048) for v in ("0.25.0", "0.26.0"))
    drop = v25.memory.activation_peak_bytes - v26.memory.activation_peak_bytes
    assert abs(drop - 4 * 1024 * LLAMA_VOCAB) <= 1


@pytest.mark.parametrize("version", ["0.27.0", "0.27.1", "0.28.0"])
def test_0_27_profile_sampler_skips_the_fp32_copy_for_the_dummy_batch(version: str) -> None:
    # 0.27.0+ apply_sampling_params returns the logits untouched unless a slot of the batch needs
    # processing (Sampler._requires_logits_processing; 0.28: needs_logits_processing, set only by
    # add_request). The profile's dummy batch (InputBatch.make_dummy) runs on slots 0..n-1 that no
    # request was added to, whose SamplingStates are the initial ones (temperature 0, top_k =
    # vocab, top_p 1, no penalties, bias or bad words): no fp32 copy, only the 2-byte logits, as
    # in 0.26 and 4 bytes per logit below 0.25. The warm-up's requests (top-k, top-p) still copy.
    v25, v26, new = (_plan(v, max_num_batched_tokens=2048) for v in ("0.25.0", "0.26.0", version))
    drop = v25.memory.activation_peak_bytes - new.memory.activation_peak_bytes
    assert abs(drop - 4 * 1024 * LLAMA_VOCAB) <= 1
    assert new.memory.activation_peak_bytes == v26.memory.activation_peak_bytes
    warmup_25 = _warmup(LLAMA8, "rtx4090", "0.25.0", max_num_seqs=256, max_num_batched_tokens=300)
    warmup_new = _warmup(LLAMA8, "rtx4090", version, max_num_seqs=256, max_num_batched_tokens=300)
    assert warmup_new == warmup_25  # logits + fp32 copy + FlashInfer's two fp32 tensors


def _warmup(model: str, gpu_name: str, version: str, **flags: object) -> int:
    spec, gpu = load_model(model), find_gpu(gpu_name)
    vllm_flags = VllmFlags(max_model_len=8192, **flags)  # type: ignore[arg-type]
    rules = engine_rules(rules_for(version), gpu, vllm_flags)
    resolved = resolve_flags(spec, gpu, vllm_flags, rules)
    return warmup_bytes(spec, gpu, resolved, rules, num_gpu_blocks=100_000)


@pytest.mark.parametrize(
    ("version", "bytes_per_logit"),
    [
        # logits, fp32 copy, FlashInfer's top-k masked copy and its softmax (fp32)
        ("0.23.0", 2 + 4 + 4 + 4),
        # logits, their clone for raw logprobs, the fp32 cast handed to FlashInfer, its two
        ("0.26.0", 2 + 2 + 4 + 4 + 4),
        ("0.29.0", 2 + 4 + 4 + 4),
    ],
)
def test_v2_warmup_samples_min_seqs_and_half_the_batch_with_flashinfer(
    version: str, bytes_per_logit: int
) -> None:
    # warmup_kernels: min(max_num_seqs, max_num_batched_tokens // 2) requests of 2 prompt tokens;
    # all of the transient must find free memory (no fitted share on Model Runner V2)
    rows = min(256, 300 // 2)
    got = _warmup(LLAMA8, "rtx4090", version, max_num_seqs=256, max_num_batched_tokens=300)
    assert abs(got - bytes_per_logit * rows * LLAMA_VOCAB) <= 1


def test_0_22_warmup_uses_triton_top_k_top_p_and_its_per_program_buffer() -> None:
    # 0.22's V2 sampler has no FlashInfer path: logits + fp32 copy, top-k/top-p in place, and
    # apply_top_k_top_p_triton caches an fp32 [min(pow2(rows), SMs), vocab] buffer (128 SMs
    # assumed)
    vocab = load_model("Qwen/Qwen3-8B").vocab_size
    got = _warmup("Qwen/Qwen3-8B", "rtx4090", "0.22.0", max_num_seqs=256)
    assert abs(got - (6 * 256 + 4 * 128) * vocab) <= 1


def test_v2_warmup_without_flashinfer_on_rocm_falls_back_to_triton() -> None:
    got = _warmup(LLAMA8, "mi300x", "0.29.0", max_num_seqs=64, max_num_batched_tokens=8192)
    assert abs(got - (6 * 64 + 4 * 64) * LLAMA_VOCAB) <= 1


def _l4_plan(**flags: object) -> Plan:
    return plan(
        load_model("Qwen/Qwen3-14B-AWQ"),
        find_gpu("L4"),
        VllmFlags(**flags),  # type: ignore[arg-type]
        vllm_version="0.28.0",
    )


def test_v2_warmup_finds_the_profile_peak_released_before_the_pool() -> None:
    # 0.28, Qwen3-14B-AWQ on one L4 at the default 0.92: free - budget (1.26 GiB) less the graph
    # pool (0.94) leaves less than the warm-up's 256 x 151,936 logits x 14 bytes (0.51 GiB), but
    # the pool is sized after memory_profiling released the profile's transient peak, so the
    # device has that peak free again and vLLM starts (four such runs in public logs did).
    result = _l4_plan()
    mem = result.memory
    beside = mem.total_bytes - 0.5 * 2**30 - mem.budget_bytes - mem.cuda_graph_bytes
    assert beside < 14 * 256 * 151_936
    assert result.starts


def test_v2_warmup_oom_above_the_released_peak_is_fixed_by_fewer_max_num_seqs() -> None:
    result = _l4_plan(gpu_memory_utilization=0.93)
    assert result.error is not None and result.error.kind == "cuda_oom_sampler_warmup"
    assert _l4_plan(gpu_memory_utilization=0.93, max_num_seqs=128).starts
