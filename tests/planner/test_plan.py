"""Start-up behaviour a user notices, on the canonical cards (the folk tips, settled)."""

from __future__ import annotations

import pytest

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GIB, GpuSpec, find_gpu
from kvwise.errors import InvalidFlagError
from kvwise.planner import Plan, plan

QWEN7 = "Qwen/Qwen2.5-7B-Instruct"


def _plan(
    model: str = QWEN7, gpu: str = "rtx4090", version: str | None = None, **flags: object
) -> Plan:
    return plan(load_model(model), find_gpu(gpu), VllmFlags(**flags), vllm_version=version)  # type: ignore[arg-type]


def test_canonical_case_starts_with_about_100k_tokens_and_the_32k_default() -> None:
    result = _plan()
    assert result.starts and result.flags.max_model_len == 32768
    assert (
        80_000 < result.kv.tokens < 130_000
    )  # folk_tips.md reference arithmetic: 80-100k tokens at 0.9
    assert result.kv.bytes_per_token == 57344


def test_lowering_utilization_shrinks_the_kv_pool_by_exactly_the_budget_difference() -> None:
    high, low = _plan(gpu_memory_utilization=0.9), _plan(gpu_memory_utilization=0.8)
    lost = (high.memory.kv_cache_bytes - low.memory.kv_cache_bytes) / GIB
    assert lost == pytest.approx(0.1 * high.gpu.memory_gib, abs=0.01)


def test_max_model_len_changes_concurrency_not_the_pool_in_v1() -> None:
    # validation: Qwen2.5-7B on H100 logs the same KV GiB at max_model_len 8192 and 32768
    short, long = _plan(max_model_len=8192), _plan(max_model_len=32768)
    assert short.kv.num_gpu_blocks == long.kv.num_gpu_blocks
    assert short.kv.max_concurrency == pytest.approx(4 * long.kv.max_concurrency)


def test_fp8_kv_cache_doubles_the_tokens() -> None:
    assert _plan(kv_cache_dtype="fp8").kv.tokens == pytest.approx(2 * _plan().kv.tokens, rel=0.001)


def test_enforce_eager_gives_the_graph_estimate_to_kv_when_graphs_are_in_the_budget() -> None:
    graphs = _plan(version="0.33.0")
    eager = _plan(version="0.33.0", enforce_eager=True)
    assert eager.memory.cuda_graph_bytes == 0
    assert eager.memory.kv_cache_bytes > graphs.memory.kv_cache_bytes
    # before 0.21 the graphs sat outside the budget: eager frees device memory, not KV
    assert (
        _plan(version="0.19.0", enforce_eager=True).kv.tokens == _plan(version="0.19.0").kv.tokens
    )


@pytest.mark.parametrize("version", ["0.21.0", "0.25.0"])
def test_fewer_max_num_seqs_lowers_the_activation_peak(version: str) -> None:
    # the profile's sampler over max_num_seqs x vocab logits is its largest transient here (V1
    # runner: 14 bytes per logit; V2 0.22-0.25: the logits and their fp32 copy). From 0.27 the
    # V2 profile keeps only the bf16 logits, below the MLP's transient: max_num_seqs no longer
    # moves the peak (test_v2_runner.py)
    assert (
        _plan(version=version, max_num_seqs=32).memory.activation_peak_bytes
        < _plan(version=version, max_num_seqs=256).memory.activation_peak_bytes
    )


def test_utilization_above_free_memory_is_refused_at_startup() -> None:
    result = _plan(gpu_memory_utilization=0.99)
    assert result.error is not None and result.error.kind == "insufficient_free_memory_at_startup"
    assert "Free memory on device" in result.error.message


def test_another_process_on_the_card_is_checked_against_free_memory() -> None:
    gpu = find_gpu("rtx4090")
    busy = GpuSpec(**{**gpu.__dict__, "free_bytes": int(20 * GIB)})
    result = plan(load_model(QWEN7), busy, VllmFlags(gpu_memory_utilization=0.9))
    assert result.error is not None and result.error.kind == "insufficient_free_memory_at_startup"


def test_low_utilization_leaves_no_room_for_the_kv_cache() -> None:
    result = _plan(gpu_memory_utilization=0.6)
    assert result.error is not None and result.error.kind == "no_kv_cache_memory"


def test_72b_bf16_does_not_fit_one_24gb_card() -> None:
    result = _plan(model="Qwen/Qwen2.5-72B-Instruct")
    assert result.error is not None and result.error.kind == "weights_exceed_memory"


def test_default_32k_len_at_low_utilization_fails_with_vllms_estimate() -> None:
    result = _plan(gpu_memory_utilization=0.7, version="0.19.0")
    assert result.error is not None and result.error.kind == "max_model_len_exceeds_kv_cache"
    assert "estimated maximum model length is" in result.error.message
    fixed = _plan(gpu_memory_utilization=0.7, version="0.19.0", max_model_len=8192)
    assert fixed.starts


def test_v0_logs_the_old_wording_for_the_same_failure() -> None:
    # V0 profiles a whole max_model_len prompt (no chunked prefill up to 32K): 16k here
    result = _plan(gpu_memory_utilization=0.74, version="0.6.4", max_model_len=16384)
    assert result.error is not None and result.error.kind == "max_model_len_exceeds_kv_cache"
    assert (
        "is larger than the maximum number of tokens that can be stored in KV cache"
        in result.error.message
    )


def test_graphs_outside_the_budget_oom_at_high_utilization_and_eager_fixes_it() -> None:
    result = _plan(version="0.19.0", gpu_memory_utilization=0.96)
    assert result.error is not None and result.error.kind == "cuda_oom_cuda_graph_capture"
    assert _plan(version="0.19.0", gpu_memory_utilization=0.96, enforce_eager=True).starts


def test_sampler_warmup_oom_is_fixed_by_fewer_max_num_seqs() -> None:
    kwargs = {
        "model": "google/gemma-3-27b-it",
        "gpu": "h100",
        "version": "0.19.0",
        "gpu_memory_utilization": 0.97,
    }
    result = _plan(**kwargs)  # type: ignore[arg-type]
    assert result.error is not None and result.error.kind == "cuda_oom_sampler_warmup"
    assert _plan(max_num_seqs=128, **kwargs).starts  # type: ignore[arg-type]


def test_kv_cache_memory_bytes_sets_the_pool_directly() -> None:
    result = _plan(kv_cache_memory_bytes=4 * GIB)
    assert result.memory.kv_cache_bytes == 4 * GIB
    assert result.kv.num_gpu_blocks == 4 * GIB // (16 * 57344)


def test_auto_max_model_len_fits_the_pool() -> None:
    result = _plan(gpu_memory_utilization=0.7, version="0.19.0", max_model_len=-1)
    assert result.starts and 0 < result.flags.max_model_len < 32768


def test_tensor_parallel_must_divide_the_attention_heads() -> None:
    with pytest.raises(InvalidFlagError, match="divisible"):
        _plan(tensor_parallel_size=3)


def test_two_cards_halve_the_weights_per_gpu() -> None:
    single, double = _plan(), _plan(tensor_parallel_size=2)
    assert double.memory.weights_bytes < 0.51 * single.memory.weights_bytes
    assert double.kv.tokens > 2 * single.kv.tokens
    assert double.num_gpus == 2
    assert any("NVLink" in w for w in double.warnings)


def test_host_ram_shortage_is_reported_as_killed() -> None:
    result = plan(
        load_model(QWEN7), find_gpu("rtx4090"), VllmFlags(), host_ram_available_bytes=4 * GIB
    )
    assert result.error is not None and result.error.kind == "host_ram"


def test_json_contract_keys() -> None:
    data = _plan().to_json()
    assert set(data) >= {
        "model",
        "gpu",
        "vllm_version",
        "flags",
        "memory_gib",
        "kv",
        "starts",
        "error",
        "host_ram_gib",
        "warnings",
    }
    assert set(data["memory_gib"]) >= {
        "total",
        "budget",
        "weights",
        "activation_peak",
        "non_torch",
        "cuda_graph",
        "kv_cache",
    }
    assert set(data["kv"]) == {
        "bytes_per_token",
        "block_size",
        "num_gpu_blocks",
        "tokens",
        "max_concurrency",
    }
    assert data["gpu"] == {"name": "RTX 4090", "memory_gib": 23.55, "count": 1}


def test_mistral_v01_sliding_window_caps_blocks_per_request() -> None:
    # every layer keeps only its 4096-token window (+ tokens in flight), so a 32k request needs
    # far fewer blocks than a full-attention model of the same shape
    result = _plan(model="mistralai/Mistral-7B-v0.1", max_model_len=32768)
    full = _plan(model="mistralai/Mistral-7B-v0.3", max_model_len=32768)
    assert result.kv.blocks_per_request < full.kv.blocks_per_request / 3
    assert result.kv.max_concurrency > 3 * full.kv.max_concurrency


def test_bitsandbytes_4bit_quarters_the_linear_weights() -> None:
    bf16 = _plan(model="Qwen/Qwen2.5-14B", gpu="l40s").memory.weights_bytes
    nf4 = _plan(
        model="Qwen/Qwen2.5-14B", gpu="l40s", quantization="bitsandbytes"
    ).memory.weights_bytes
    assert 0.25 * bf16 < nf4 < 0.4 * bf16  # embeddings and lm_head stay 16-bit


def test_pipeline_parallel_splits_layers_and_keeps_all_kv_heads() -> None:
    one = _plan(model="Qwen/Qwen2.5-14B", gpu="l40s")
    two = _plan(model="Qwen/Qwen2.5-14B", gpu="l40s", pipeline_parallel_size=2)
    assert two.memory.weights_bytes < 0.6 * one.memory.weights_bytes
    assert two.kv.bytes_per_token == one.kv.bytes_per_token // 2  # half the layers per rank


def test_awq_needs_an_awq_checkpoint() -> None:
    with pytest.raises(InvalidFlagError, match=r"AWQ|awq"):
        _plan(quantization="awq")


def test_v0_budget_beyond_free_memory_fails_allocating_kv_not_capturing_graphs() -> None:
    # 0.6.3 budgets what the instance adds after its CUDA context exists, so 0.99 of the card
    # is more than is free; 0.6.4's global accounting counts the context inside the budget
    result = _plan(
        version="0.6.3", gpu_memory_utilization=0.99, max_model_len=8192, enforce_eager=True
    )
    assert result.error is not None and result.error.kind == "insufficient_free_memory_at_startup"
    assert "allocating the KV cache" in result.error.message


def test_bitsandbytes_keeps_its_nested_absmax_until_0_10() -> None:
    # in-flight bitsandbytes of Llama-3-8B on a T4: vllm#5569 (vLLM 0.5.0.post1, batch f, examined)
    # logs "Loading model weights took 5.3128 GB"; through 0.9.2 the absmax stay uint8, 0.10.0's
    # bitsandbytes_loader._dequantize_dq makes them fp32 (3 more bytes per 64 linear weights)
    model, t4 = load_model("meta-llama/Meta-Llama-3-8B-Instruct"), find_gpu("t4")
    flags = VllmFlags(quantization="bitsandbytes", dtype="float16", max_model_len=8192)
    weights = {
        v: plan(model, t4, flags, vllm_version=v).memory.weights_bytes / GIB
        for v in ("0.5.0.post1", "0.9.2", "0.10.0")
    }
    assert abs(weights["0.5.0.post1"] - 5.3128) < 0.02
    assert weights["0.9.2"] == weights["0.5.0.post1"]
    # 6.98 B quantized linear weights x 3/64 bytes: 0.30 GiB
    assert 0.28 < weights["0.10.0"] - weights["0.9.2"] < 0.32
