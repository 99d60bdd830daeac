"""Rules that differ by vLLM release, each asserted as vLLM's source at that release does it
(the file and function are named in docs/vllm_rules.md)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GIB, find_gpu
from kvwise.core.models import SLIDING
from kvwise.errors import InvalidFlagError, UnsupportedModelError
from kvwise.planner import Plan, plan
from kvwise.planner.defaults import engine_rules, resolve_flags, rules_for
from kvwise.planner.memory import capture_sizes

LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
QWEN7 = "Qwen/Qwen2.5-7B-Instruct"
MIB = 1024 * 1024


def _plan(
    model: str, gpu: str, version: str, startup_free_bytes: int | None = None, **flags: object
) -> Plan:
    return plan(
        load_model(model),
        find_gpu(gpu),
        VllmFlags(**flags),  # type: ignore[arg-type]
        vllm_version=version,
        startup_free_bytes=startup_free_bytes,
    )


# --- CUDA graphs inside or on top of the budget ---------------------------------------------------


@pytest.mark.parametrize(
    ("model", "version", "in_budget"),
    [
        (LLAMA8, "0.19.1", False),  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS opt-in (default 0)
        (LLAMA8, "0.20.0", True),  # default 1, V1 model runner for every model
        (LLAMA8, "0.23.0", False),  # Llama on Model Runner V2, whose estimate is 0
        ("Qwen/Qwen3-30B-A3B", "0.25.0", True),  # MoE not listed: V1 runner, estimate deducted
        (QWEN7, "0.25.0", False),  # every dense model on Model Runner V2
        (LLAMA8, "0.29.0", True),  # V2 runner's profile_cudagraph_memory measures the graphs
    ],
)
def test_graph_estimate_enters_the_budget_only_where_the_runner_makes_one(
    model: str, version: str, in_budget: bool
) -> None:
    graphs = _plan(model, "h100 sxm", version, max_model_len=8192)
    eager = _plan(model, "h100 sxm", version, max_model_len=8192, enforce_eager=True)
    assert graphs.memory.cuda_graph_in_budget is in_budget
    # graphs on top leave the KV pool alone; graphs in the budget take from it
    assert (graphs.memory.kv_cache_bytes < eager.memory.kv_cache_bytes) is in_budget


def test_graphs_on_top_oom_at_0_95_on_a_24gb_card_where_the_budget_holds_them() -> None:
    on_top = _plan(LLAMA8, "rtx4090", "0.23.0", gpu_memory_utilization=0.95, max_model_len=8192)
    in_budget = _plan(LLAMA8, "rtx4090", "0.20.0", gpu_memory_utilization=0.95, max_model_len=8192)
    assert on_top.error is not None and on_top.error.kind == "cuda_oom_cuda_graph_capture"
    assert in_budget.starts


# --- the start-up free-memory check ----------------------------------------------------------------


def test_free_memory_check_compares_vllms_own_figure_with_ceil_total_x_util() -> None:
    gpu = find_gpu("h100 sxm")
    requested = math.ceil(gpu.memory_bytes * 0.9)  # request_memory(): ceil(total x util)
    enough = _plan(QWEN7, "h100 sxm", "0.19.0", requested, gpu_memory_utilization=0.9)
    short = _plan(QWEN7, "h100 sxm", "0.19.0", requested - 1, gpu_memory_utilization=0.9)
    # exactly enough passes the check (and then has nothing left for graphs on top of it)
    assert enough.error is not None and enough.error.kind == "cuda_oom_cuda_graph_capture"
    assert short.error is not None and short.error.kind == "insufficient_free_memory_at_startup"


def test_the_v0_and_early_v1_releases_have_no_free_memory_check() -> None:
    gpu = find_gpu("h100 sxm")
    low = int(gpu.memory_bytes * 0.5)
    result = _plan(QWEN7, "h100 sxm", "0.9.0", low, gpu_memory_utilization=0.9)
    # no ValueError up front: the pool is sized past free memory and its allocation fails
    assert result.error is not None
    assert result.error.message.startswith("torch.OutOfMemoryError")


# --- V0 and V1 < 0.9.1: every layer at full length -------------------------------------------------


def test_v0_gives_gemma2_sliding_layers_full_length_pages() -> None:
    gemma = load_model("google/gemma-2-9b")
    v0 = _plan("google/gemma-2-9b", "a100 80gb", "0.6.5", max_model_len=8192)
    hybrid = _plan("google/gemma-2-9b", "a100 80gb", "0.9.1", max_model_len=8192)
    # a V0 block holds a page of every layer: 42 layers x 16 tokens x 8 heads x 2 x 256 x 2 bytes
    page = 16 * gemma.num_kv_heads * 2 * gemma.head_dim * 2
    assert v0.kv.bytes_per_block == gemma.num_layers * page
    assert v0.kv.tokens == v0.kv.num_gpu_blocks * 16
    # the hybrid allocator's groups hold half the layers per block: twice the blocks
    assert hybrid.kv.bytes_per_block == gemma.num_layers // 2 * page


def test_v1_before_the_hybrid_allocator_also_uses_full_length() -> None:
    early = _plan("google/gemma-2-9b", "a100 80gb", "0.9.0", max_model_len=8192)
    v0 = _plan("google/gemma-2-9b", "a100 80gb", "0.6.5", max_model_len=8192)
    assert early.kv.bytes_per_block == v0.kv.bytes_per_block


def test_v0_until_0_6_4_caps_gemma2_to_its_sliding_window() -> None:
    capped = _plan("google/gemma-2-9b", "a100 80gb", "0.6.4")
    assert capped.flags.max_model_len == 4096
    with pytest.raises(InvalidFlagError, match="sliding_window=4096"):
        _plan("google/gemma-2-9b", "a100 80gb", "0.6.4", max_model_len=8192)
    assert _plan("google/gemma-2-9b", "a100 80gb", "0.6.5").flags.max_model_len == 8192


# --- 0.4.x ---------------------------------------------------------------------------------------


def test_0_4_plans_with_the_v0_profile_and_swap_defaults() -> None:
    result = _plan("meta-llama/Llama-2-7b-hf", "a100 80gb", "0.4.2")
    assert result.engine == "V0" and result.starts
    # SchedulerConfig: max(max_model_len 4096, 2048) tokens profiled, 256 sequences, 4 GiB swap
    assert result.flags.max_num_batched_tokens == 4096
    assert result.flags.max_num_seqs == 256
    assert result.flags.swap_space == 4
    assert result.kv.tokens == result.kv.num_gpu_blocks * 16


def test_releases_before_0_4_are_refused() -> None:
    with pytest.raises(InvalidFlagError, match="predates"):
        rules_for("0.3.3")


# --- V0 TP > 1: non-torch memory by interconnect -----------------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "tp", "extra_bytes"),
    [
        ("rtx4090", 2, 0),  # GeForce: no P2P, custom all-reduce off
        ("a100 80gb", 2, 24 * MIB),  # three 8 MiB custom all-reduce buffers
        ("a100 80gb", 4, 24 * MIB),  # full NVLink: custom all-reduce above 2 GPUs too
        ("l40s", 2, 24 * MIB),  # PCIe P2P: custom all-reduce at 2 GPUs
        ("l40s", 4, 0),  # "not supported on more than two PCIe-only GPUs"
        ("h100 sxm", 2, int(1.85 * GIB)),  # NVSwitch Hopper: NCCL NVLS buffers (0.19 sweep fit)
    ],
)
def test_v0_tensor_parallel_non_torch_follows_the_interconnect(
    gpu: str, tp: int, extra_bytes: int
) -> None:
    result = _plan(QWEN7, gpu, "0.6.3", tensor_parallel_size=tp)
    assert result.memory.non_torch_bytes == int(0.25 * GIB) + extra_bytes


# --- LoRA slots -------------------------------------------------------------------------------------


def test_lora_slots_for_four_rank_64_adapters_on_llama_3_1_8b() -> None:
    # By hand from create_lora_weights (0.19): per layer and unit of rank, lora_a inputs plus
    # lora_b outputs: qkv 3x4096 + 4096 + 2x1024 = 18,432; o_proj 4096 + 4096 = 8,192;
    # gate_up 2 x (4096 + 14,336) = 36,864; down 14,336 + 4096 = 18,432 -> 81,920.
    # 32 layers x 81,920 x rank 64 = 167,772,160; embed_tokens (128,256 + 4096) x 64 and
    # lm_head (4096 + 128,256) x 64 = 16,941,056 -> 184,713,216 per adapter, x 4 adapters x 2 bytes.
    base = _plan(LLAMA8, "h100 sxm", "0.19.0", max_model_len=8192)
    lora = _plan(
        LLAMA8,
        "h100 sxm",
        "0.19.0",
        max_model_len=8192,
        enable_lora=True,
        max_loras=4,
        max_lora_rank=64,
    )
    assert lora.memory.weights_bytes - base.memory.weights_bytes == 1_477_705_728
    assert lora.kv.num_gpu_blocks < base.kv.num_gpu_blocks


def test_lora_extra_vocabulary_rows_until_0_12() -> None:
    flags = {"enable_lora": True, "max_loras": 4, "max_lora_rank": 64, "max_model_len": 8192}
    old = _plan(LLAMA8, "h100 sxm", "0.11.0", **flags)
    new = _plan(LLAMA8, "h100 sxm", "0.12.0", **flags)
    # per adapter: 256 extra rows in embed lora_a and lm_head lora_b (2 x 256 x 64; 128,256 + 256
    # is already a multiple of the 256 padding) and the extra-vocabulary embeddings that both the
    # embedding and the logits wrapper hold (2 x 256 x 4096); x 4 adapters x 2 bytes
    extra = 2 * 256 * 64 + 2 * 256 * 4096
    assert old.memory.weights_bytes - new.memory.weights_bytes == 4 * 2 * extra


def test_lora_rank_outside_the_releases_choices_is_refused() -> None:
    with pytest.raises(InvalidFlagError, match="max_lora_rank"):
        _plan(LLAMA8, "h100 sxm", "0.5.0", enable_lora=True, max_lora_rank=128)
    assert _plan(LLAMA8, "h100 sxm", "0.5.5", enable_lora=True, max_lora_rank=128).starts


def test_lora_on_moe_experts_is_named_as_not_modelled() -> None:
    with pytest.raises(UnsupportedModelError, match="not modelled"):
        _plan("Qwen/Qwen3-30B-A3B", "h100 sxm", "0.19.0", enable_lora=True)


def test_max_cpu_loras_below_max_loras_is_refused() -> None:
    with pytest.raises(InvalidFlagError, match="max_cpu_loras"):
        _plan(LLAMA8, "h100 sxm", "0.19.0", enable_lora=True, max_loras=4, max_cpu_loras=2)


# --- V0 profile batch: when chunked prefill stays off above 32K ---------------------------------------


@pytest.mark.parametrize(
    ("version", "flags", "chunked"),
    [
        ("0.6.3", {}, True),  # > 32K: chunked prefill on, 512-token profile batch
        ("0.6.3", {"enable_lora": True}, False),  # LoRA keeps it off: a whole prompt is profiled
        ("0.5.3", {"enable_prefix_caching": True}, False),  # prefix caching kept it off until 0.6.2
        ("0.6.3", {"enable_prefix_caching": True}, True),
    ],
)
def test_v0_long_context_profiles_a_whole_prompt_where_chunked_prefill_stays_off(
    version: str, flags: dict[str, object], chunked: bool
) -> None:
    result = _plan(LLAMA8, "a100 80gb", version, max_model_len=65536, **flags)
    assert result.flags.enable_chunked_prefill is chunked
    assert result.flags.max_num_batched_tokens == (512 if chunked else 65536)


def test_v0_sliding_window_model_keeps_chunked_prefill_off() -> None:
    llama = load_model(LLAMA8)
    windowed = replace(llama, layer_types=(SLIDING,) * llama.num_layers, sliding_window=4096)
    flags = VllmFlags(max_model_len=65536)
    result = plan(windowed, find_gpu("a100 80gb"), flags, vllm_version="0.6.3")
    assert not result.flags.enable_chunked_prefill
    assert result.flags.max_num_batched_tokens == 65536


@pytest.mark.parametrize(
    ("version", "kv_cache_dtype", "exists"),
    [
        ("0.4.0", "fp8", False),  # only fp8_e5m2 then
        ("0.4.0", "fp8_e5m2", True),
        ("0.4.2", "fp8_e4m3", False),
        ("0.4.3", "fp8_e4m3", True),
        ("0.10.2", "bfloat16", False),
        ("0.11.0", "bfloat16", True),
        ("0.17.0", "float16", False),
        ("0.18.0", "float16", True),
    ],
)
def test_kv_cache_dtype_choices_follow_the_release(
    version: str, kv_cache_dtype: str, exists: bool
) -> None:
    if exists:
        _plan(LLAMA8, "h100 sxm", version, max_model_len=8192, kv_cache_dtype=kv_cache_dtype)
        return
    with pytest.raises(InvalidFlagError, match="does not exist in vLLM"):
        _plan(LLAMA8, "h100 sxm", version, max_model_len=8192, kv_cache_dtype=kv_cache_dtype)


# --- V0 activation peak ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_model_len", "logged_peak_gib"),
    [(20000, 17.06), (29000, 17.98), (35000, 15.05)],  # vllm#10517, 0.6.4, RTX 3090
)
def test_v0_profile_peak_is_the_mlp_at_down_proj_or_the_sampler_whichever_is_larger(
    max_model_len: int, logged_peak_gib: float
) -> None:
    result = _plan(LLAMA8, "rtx3090", "0.6.4", max_model_len=max_model_len)
    # the log's peak_torch_memory holds the weights and the profile's transient peak
    peak_gib = (result.memory.weights_bytes + result.memory.activation_peak_bytes) / GIB
    assert peak_gib == pytest.approx(logged_peak_gib, abs=0.02)


# --- dtype "auto" on cards without bf16 ------------------------------------------------------------


def test_bf16_checkpoint_on_a_t4_is_refused_at_default_dtype_until_0_9_1() -> None:
    with pytest.raises(InvalidFlagError, match="Bfloat16 is only supported"):
        _plan(LLAMA8, "t4", "0.9.0", max_model_len=2048)
    assert _plan(LLAMA8, "t4", "0.9.0", max_model_len=2048, dtype="half").flags.dtype == "float16"
    # 0.9.1 _resolve_auto_dtype: the platform's supported dtype instead
    assert _plan(LLAMA8, "t4", "0.9.1", max_model_len=2048).flags.dtype == "float16"


def test_v0_checks_max_model_len_against_the_whole_pool_whatever_the_window() -> None:
    # Mistral-7B-v0.1 (4096-token window, 32K context): V0's raise_if_cache_size_invalid wants
    # max_model_len <= blocks x 16; V1's SlidingWindowSpec needs only the window's blocks
    v0 = _plan("mistralai/Mistral-7B-v0.1", "rtx4090", "0.6.3", gpu_memory_utilization=0.8)
    v1 = _plan("mistralai/Mistral-7B-v0.1", "rtx4090", "0.9.1", gpu_memory_utilization=0.8)
    assert v0.error is not None and v0.error.kind == "max_model_len_exceeds_kv_cache"
    assert v0.kv.num_gpu_blocks * 16 < 32768
    assert v0.kv.max_concurrency == pytest.approx(v0.kv.num_gpu_blocks * 16 / 32768)
    assert v1.starts


@pytest.mark.parametrize(
    ("model", "version", "on_v2"),
    [
        ("Qwen/Qwen3-8B", "0.21.0", False),  # no Model Runner V2 by default yet
        ("Qwen/Qwen3-8B", "0.22.0", True),  # DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES = {Qwen3}
        (QWEN7, "0.22.0", False),  # Qwen2 not listed
        (LLAMA8, "0.23.0", True),  # Llama and Mistral added
        ("Qwen/Qwen3-30B-A3B", "0.23.0", False),  # MoE excluded until 0.24
        (QWEN7, "0.25.0", True),  # every dense, non-hybrid model
    ],
)
def test_model_runner_v2_keeps_int32_penalty_counts_per_slot(
    model: str, version: str, on_v2: bool
) -> None:
    spec = load_model(model)
    result = _plan(model, "h100 sxm", version, max_model_len=8192, max_num_seqs=256)
    penalty_bytes = 4 * 256 * spec.vocab_size  # int32[max_num_seqs, vocab]
    base = int(0.25 * GIB)
    assert result.memory.non_torch_bytes == base + (penalty_bytes if on_v2 else 0)


def test_the_warning_names_model_runner_v2_when_graphs_land_outside_the_budget() -> None:
    result = _plan(LLAMA8, "h100 sxm", "0.23.0", max_model_len=8192)
    assert any("Model Runner V2 estimates none" in w for w in result.warnings)
    assert not any("CUDA graphs" in w for w in _plan(LLAMA8, "h100 sxm", "0.20.0").warnings)


@pytest.mark.parametrize(
    ("version", "num_sizes"),
    [
        ("0.10.0", 3 + 64),  # before GptOssForCausalLMConfig: [1, 2, 4] + 8k to min(2 x 1024, 512)
        ("0.10.1", 3 + 31 + 49),  # override list: step 16 from 256 to 1024 (83 sizes)
        ("0.11.0", 3 + 31 + 47),  # to 992 (81 sizes)
        ("0.19.0", 3 + 31 + 49),  # max_cudagraph_capture_size = 1024
    ],
)
def test_gpt_oss_raises_the_largest_capture_size(version: str, num_sizes: int) -> None:
    # vllm/model_executor/models/config.py:GptOssForCausalLMConfig ("This will increase the
    # number of CUDA graphs from 67 to 83"); H100 defaults: max_num_seqs 1024, MNBT 8192
    gpu, spec = find_gpu("h100 sxm"), load_model("openai/gpt-oss-20b")
    flags = VllmFlags(max_model_len=8192)
    rules = engine_rules(rules_for(version), gpu, flags)
    sizes = capture_sizes(spec, resolve_flags(spec, gpu, flags, rules), rules)
    assert len(sizes) == num_sizes
    llama = capture_sizes(load_model(LLAMA8), resolve_flags(spec, gpu, flags, rules), rules)
    assert max(llama) == 512


def test_0_11_moves_the_custom_all_reduce_before_the_snapshot_out_of_the_budget() -> None:
    # v0.11.0:vllm/v1/worker/gpu_worker.py:init_device sets up NCCL and the custom all-reduce
    # (three 8 MiB buffers, GPU P2P at TP 2) before MemorySnapshot(); 0.10.2 snapshots first
    # and charges them as non-torch memory
    kwargs = {"tensor_parallel_size": 2, "max_model_len": 8192, "enforce_eager": True}
    before = _plan(LLAMA8, "a100 80gb", "0.10.2", **kwargs)
    after = _plan(LLAMA8, "a100 80gb", "0.11.0", **kwargs)
    assert before.memory.non_torch_bytes - after.memory.non_torch_bytes == 24 * MIB
    assert after.memory.kv_cache_bytes - before.memory.kv_cache_bytes == 24 * MIB
    # the buffers now sit on top of the budget on the device
    assert after.memory.peak_device_bytes - before.memory.peak_device_bytes == 24 * MIB
    assert any("NCCL communicator memory" in part for part in after.not_modelled)
    assert not any("NCCL" in part for part in before.not_modelled)


def test_0_11_free_memory_check_counts_the_buffers_taken_before_the_snapshot() -> None:
    # A100 80 GB: free at the snapshot = total - context (TP 1), less 24 MiB at TP 2; a budget
    # between the two figures passes the check at TP 1 and is refused at TP 2
    gpu = find_gpu("a100 80gb")
    free_tp1 = gpu.memory_bytes - int(0.5 * GIB)
    util = (free_tp1 - 12 * MIB) / gpu.memory_bytes
    kwargs = {"gpu_memory_utilization": util, "max_model_len": 8192}
    tp1 = _plan(LLAMA8, "a100 80gb", "0.19.0", **kwargs)
    assert tp1.error is None or tp1.error.kind != "insufficient_free_memory_at_startup"
    tp2 = _plan(LLAMA8, "a100 80gb", "0.19.0", tensor_parallel_size=2, **kwargs)
    assert tp2.error is not None and tp2.error.kind == "insufficient_free_memory_at_startup"


def test_a_multimodal_model_on_the_v0_engine_is_refused_naming_the_encoder_profile() -> None:
    with pytest.raises(UnsupportedModelError, match="not modelled: the vision encoder's share"):
        _plan("google/gemma-3-27b-it", "h100 sxm", "0.7.3", max_model_len=8192)
    assert _plan("google/gemma-3-27b-it", "h100 sxm", "0.19.0", max_model_len=8192).starts
