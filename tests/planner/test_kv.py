"""KV bytes, blocks and tokens, checked against logged vLLM figures and the reference arithmetic."""

from __future__ import annotations

import json

import pytest

from kvwise.core.catalog import load_model
from kvwise.core.gpus import GIB
from kvwise.core.models import spec_from_config
from kvwise.planner.kv import blocks_per_request, estimated_max_model_len, kv_layout, kv_tokens


@pytest.mark.parametrize(
    ("model_id", "kib_per_token"),
    # vLLM's KV spec at bf16, TP1: layers x KV heads x head_dim x 2 (K and V) x 2 bytes
    [
        ("Qwen/Qwen2.5-0.5B-Instruct", 12),
        ("Qwen/Qwen2.5-1.5B-Instruct", 28),
        ("Qwen/Qwen2.5-3B-Instruct", 36),
        ("Qwen/Qwen2.5-7B-Instruct", 56),
        ("Qwen/Qwen2.5-14B", 192),
        ("Qwen/Qwen2.5-32B-Instruct", 256),
        ("Qwen/Qwen2.5-72B-Instruct", 320),
    ],
)
def test_bytes_per_token_of_the_qwen25_family(model_id: str, kib_per_token: int) -> None:
    layout = kv_layout(load_model(model_id), tp=1, pp=1, block_size=16, dtype_bytes=2)
    assert layout.bytes_per_token == kib_per_token * 1024


def test_tensor_parallel_beyond_the_kv_heads_replicates_them() -> None:
    # Qwen2.5-7B has 4 KV heads: TP 8 keeps one head per rank, so per-rank KV stops shrinking
    model = load_model("Qwen/Qwen2.5-7B-Instruct")
    tp4 = kv_layout(model, tp=4, pp=1, block_size=16, dtype_bytes=2).bytes_per_token
    tp8 = kv_layout(model, tp=8, pp=1, block_size=16, dtype_bytes=2).bytes_per_token
    assert tp4 == tp8 == 56 * 1024 // 4


def test_gemma3_hybrid_groups_reproduce_the_logged_block_count() -> None:
    # vLLM 0.19 on H100: "Available KV cache memory: 19.53 GiB" -> num_gpu_blocks 15997,
    # "GPU KV cache size: 36,560 tokens", "Maximum concurrency for 8,192 tokens: 4.46x"
    layout = kv_layout(
        load_model("google/gemma-3-27b-it"), tp=1, pp=1, block_size=16, dtype_bytes=2
    )
    assert len(layout.groups) == 7
    assert int(19.53 * GIB) // layout.bytes_per_block == pytest.approx(15997, abs=5)
    per_request = blocks_per_request(layout, 8192, 8192)
    assert round(15997 / per_request, 2) == 4.46
    assert kv_tokens(layout, 15997, 8192, per_request, "blocks_per_group") == 36560


def test_tiny_cpu_model_costs_2048_bytes_per_token_as_vllm_cpu_logs() -> None:
    # the vLLM CPU engine logs 1 GiB -> "CPU KV cache size: 524,288 tokens" (fp32, 2 layers)
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "vocab_size": 2048,
        "max_position_embeddings": 2048,
        "torch_dtype": "float32",
    }
    layout = kv_layout(spec_from_config(config, "tiny"), tp=1, pp=1, block_size=16, dtype_bytes=4)
    assert layout.bytes_per_token == 2048
    assert GIB // layout.bytes_per_block * 16 == 524_288


def test_estimated_max_model_len_is_the_longest_request_that_fits() -> None:
    layout = kv_layout(
        load_model("Qwen/Qwen2.5-7B-Instruct"), tp=1, pp=1, block_size=16, dtype_bytes=2
    )
    available = 100 * layout.bytes_per_block + 5
    assert estimated_max_model_len(layout, available, 2048) == 1600


def test_published_config_round_trip() -> None:
    raw = json.dumps(
        {
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 128,
            "vocab_size": 100,
        }
    )
    spec = spec_from_config(json.loads(raw), "x")
    assert spec.num_kv_heads == 2  # no num_key_value_heads: multi-head attention


def test_mla_keeps_one_latent_head_per_token_on_every_rank() -> None:
    # DeepSeek-V2-Lite: MLAAttentionSpec page = block x (kv_lora_rank 512 + qk_rope_head_dim 64) x
    # 2 bytes, 27 layers, no separate V and no TP split: 27 x 576 x 2 = 31,104 bytes per token
    model = load_model("deepseek-ai/DeepSeek-V2-Lite-Chat")
    tp1 = kv_layout(model, tp=1, pp=1, block_size=16, dtype_bytes=2)
    tp2 = kv_layout(model, tp=2, pp=1, block_size=16, dtype_bytes=2)
    assert tp1.bytes_per_token == tp2.bytes_per_token == 31_104
    # vLLM 0.19 on H100: "Available KV cache memory: 43.61 GiB" -> num_gpu_blocks 94097
    assert int(43.61 * GIB) // tp1.bytes_per_block == pytest.approx(94097, abs=10)


def test_gpt_oss_alternating_window_gives_two_groups_of_twelve() -> None:
    # gpt-oss-20b: 12 sliding (128) + 12 full layers, 8 KV heads x 64 -> one group each; a block
    # holds 12 pages of 16 x 8 x 2 x 64 x 2 = 32,768 bytes. vLLM 0.19 H100: "Available KV cache
    # memory: 58.47 GiB", "GPU KV cache size: 1,277,184 tokens" (blocks // 2 groups x 16).
    layout = kv_layout(load_model("openai/gpt-oss-20b"), tp=1, pp=1, block_size=16, dtype_bytes=2)
    assert [(g.kind, g.num_layers, g.sliding_window) for g in layout.groups] == [
        ("full", 12, None),
        ("sliding", 12, 128),
    ]
    assert layout.bytes_per_block == 12 * 32_768
    num_blocks = int(58.47 * GIB) // layout.bytes_per_block
    tokens = kv_tokens(layout, num_blocks, 8192, 0, "blocks_per_group")
    assert tokens == pytest.approx(1_277_184, rel=0.001)


# Qwen/Qwen3-Next-80B-A3B-Instruct's config.json, the keys kvwise reads (the same values appear in
# llama.cpp issue #17578's GGUF metadata: 2048 hidden, 16 heads, 2 KV heads of 256, 512 experts,
# 10 used, 512 expert and shared-expert width, conv kernel 4)
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"],
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "intermediate_size": 5120,
    "vocab_size": 151936,
    "max_position_embeddings": 262144,
    "full_attention_interval": 4,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_value_head_dim": 128,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "torch_dtype": "bfloat16",
}


def test_qwen3_next_pads_the_deltanet_state_to_an_attention_page() -> None:
    # HybridAttentionMambaModelConfig.verify_and_update_config, by hand at TP1, bf16:
    #   DeltaNet state: conv 3 x (2 x 2048 + 4096) x 2 = 49,152 B + 32 x 128 x 128 x 2 = 1,048,576
    #   attention, one token: 2 heads x (256 + 256) x 2 = 2,048 B
    #   block = 16 x cdiv(1,097,728, 16 x 2,048) = 544 tokens; page 544 x 2,048 = 1,114,112 B
    #   ("Padding mamba page size by 1.49%"); 12 full + 36 DeltaNet layers -> 4 groups of 12
    model = spec_from_config(QWEN3_NEXT, "Qwen/Qwen3-Next-80B-A3B-Instruct")
    layout = kv_layout(model, tp=1, pp=1, block_size=16, dtype_bytes=2)
    assert layout.block_size == 544 and layout.page_bytes == 1_114_112
    assert [g.kind for g in layout.groups] == ["full", "mamba", "mamba", "mamba"]
    assert layout.bytes_per_token == 12 * 2048  # only attention layers grow with the context
    # one request of 8,192 tokens: cdiv(8192, 544) = 16 attention blocks + 1 state per group
    assert blocks_per_request(layout, 8192, 8192) == 16 + 3


def test_hybrid_models_on_releases_before_the_unified_page_are_refused() -> None:
    from kvwise.core.flags import VllmFlags
    from kvwise.core.gpus import find_gpu
    from kvwise.errors import UnsupportedModelError
    from kvwise.planner import plan

    model = spec_from_config(QWEN3_NEXT, "Qwen/Qwen3-Next-80B-A3B-Instruct")
    with pytest.raises(UnsupportedModelError, match="not modelled: the mamba/linear-attention"):
        plan(model, find_gpu("H200"), VllmFlags(tensor_parallel_size=2), vllm_version="0.10.1")
    assert plan(model, find_gpu("H200"), VllmFlags(tensor_parallel_size=2), vllm_version="0.11.0")


# deepseek-ai/DeepSeek-V3 config.json, the keys kvwise reads (hidden 7168, 61 layers, 128 heads,
# q_lora_rank 1536, kv_lora_rank 512, qk_nope/rope 128/64, v_head_dim 128, 256 routed experts of
# 2048 with 1 shared, 8 per token, dense MLP 18432 on the first 3 layers, vocab 129280)
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "intermediate_size": 18432,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
}


def test_deepseek_v3_kv_is_70272_bytes_per_token_at_any_tp() -> None:
    # 61 layers x (512 + 64) x 2 bytes = 70,272 (bf16); fp8 KV halves it
    model = spec_from_config(DEEPSEEK_V3, "deepseek-ai/DeepSeek-V3")
    for tp in (1, 8):
        assert kv_layout(model, tp=tp, pp=1, block_size=16, dtype_bytes=2).bytes_per_token == 70_272
    assert kv_layout(model, tp=8, pp=1, block_size=16, dtype_bytes=1).bytes_per_token == 35_136


def test_llama4_keeps_full_length_kv_on_chunked_layers_and_says_so() -> None:
    # vLLM disables the hybrid KV-cache manager for chunked local attention by default: every one
    # of Scout's 48 layers keeps 8 KV heads x 128 x 2 x 2 bytes per token = 196,608 bytes
    model = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    layout = kv_layout(model, tp=1, pp=1, block_size=16, dtype_bytes=2)
    assert layout.bytes_per_token == 48 * 8 * 128 * 2 * 2
    assert any("chunked-local attention" in part for part in model.not_modelled)


def _nemotron_h_like() -> dict:
    # a Nemotron-H-shaped config (keys as NemotronHConfig names them), small numbers for hand math
    return {
        "architectures": ["NemotronHForCausalLM"],
        "hidden_size": 1024,
        "num_hidden_layers": 8,
        "hybrid_override_pattern": "M-M*M-M-",
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "attention_head_dim": 128,
        "intermediate_size": 4096,
        "vocab_size": 1000,
        "mamba_num_heads": 32,
        "mamba_head_dim": 64,
        "n_groups": 1,
        "ssm_state_size": 128,
        "conv_kernel": 4,
        "torch_dtype": "bfloat16",
    }


def test_mamba2_state_replicates_its_group_when_tp_does_not_divide_it() -> None:
    # mamba2_state_shape at TP2 with n_groups 1: the group is extended to 2 (extra_groups_for_
    # head_shards), conv (4 - 1) x (2048 + 2 x 2 x 128) / 2 x 2 B = 7,680; SSM 32 / 2 x 64 x 128
    # x 2 B = 262,144; page 269,824 B. Attention, one token: 1 KV head x 2 x 128 x 2 = 512 B ->
    # block 16 x cdiv(269,824, 16 x 512) = 528 tokens. One attention and 4 mamba layers, the 3
    # MLP layers keep nothing: groups of 1 -> 1 full + 4 mamba groups.
    model = spec_from_config(_nemotron_h_like(), "nemotron-h-like")
    layout = kv_layout(model, tp=2, pp=1, block_size=16, dtype_bytes=2)
    assert layout.block_size == 528
    assert [g.kind for g in layout.groups] == ["full"] + ["mamba"] * 4
    assert layout.bytes_per_token == 512


def test_mla_before_its_latent_cache_holds_k_and_v_per_head() -> None:
    # vllm PR #10927 (V0, before MLA), DeepSeek-V2-Lite-Chat on H100: "Loading model weights took
    # 29.3010 GB", "kv_cache_size=35.42GiB", "# GPU blocks: 5373": a block of 16 tokens x 27
    # layers x 16 heads x (K + V) x 256 x 2 bytes = 7,077,888 bytes
    from kvwise.core.weights import weight_bytes_per_rank
    from kvwise.planner.kv_release import for_release

    model = for_release(load_model("deepseek-ai/DeepSeek-V2-Lite-Chat"), "0.6.4")
    layout = kv_layout(model, tp=1, pp=1, block_size=16, dtype_bytes=2)
    assert layout.bytes_per_block == 7_077_888
    assert int(35.42 * GIB) // layout.bytes_per_block == 5373
    assert weight_bytes_per_rank(model) / GIB == pytest.approx(29.30, abs=0.05)
    latent = for_release(load_model("deepseek-ai/DeepSeek-V2-Lite-Chat"), "0.7.3")
    assert kv_layout(latent, tp=1, pp=1, block_size=16, dtype_bytes=2).bytes_per_token == 31_104


def _hybrid_plan(config: dict, version: str, **flags: object):  # type: ignore[no-untyped-def]
    from kvwise.core.flags import VllmFlags
    from kvwise.core.gpus import find_gpu
    from kvwise.planner import plan

    model = spec_from_config(config, str(config["architectures"][0]))
    vllm_flags = VllmFlags(tensor_parallel_size=2, max_model_len=2048, **flags)  # type: ignore[arg-type]
    return plan(model, find_gpu("H200"), vllm_flags, vllm_version=version)


def test_prefix_caching_keeps_two_state_pages_per_request_in_align_mode() -> None:
    # 0.26+: prefix caching is on by default for hybrid models (ModelConfig.
    # is_prefix_caching_supported); 0.28 MambaModelConfig sets mamba_cache_mode "align", and
    # MambaSpec.max_memory_usage_bytes holds 2 state pages per request instead of 1: one more
    # block per mamba group (Qwen3-Next: 3 DeltaNet groups) in every request's share of the pool
    default = _hybrid_plan(QWEN3_NEXT, "0.28.0")
    without = _hybrid_plan(QWEN3_NEXT, "0.28.0", enable_prefix_caching=False)
    assert default.kv.blocks_per_request == without.kv.blocks_per_request + 3
    assert default.kv.max_concurrency < without.kv.max_concurrency
    # 0.25: hybrids had no prefix caching by default: one state page
    assert _hybrid_plan(QWEN3_NEXT, "0.25.0").kv.blocks_per_request == without.kv.blocks_per_request


def test_mamba_all_mode_is_refused_and_no_prefix_caching_plans() -> None:
    from kvwise.errors import UnsupportedModelError

    # 0.26-0.27: Nemotron-H has SupportsMambaPrefixCaching, so prefix caching means "all" mode
    # (a state page per block, chunk-aligned blocks), which kvwise does not size
    with pytest.raises(UnsupportedModelError, match="not modelled: mamba_cache_mode 'all'"):
        _hybrid_plan(_nemotron_h_like(), "0.27.0")
    assert _hybrid_plan(_nemotron_h_like(), "0.27.0", enable_prefix_caching=False).starts
    # 0.28: every hybrid gets "align"
    assert _hybrid_plan(_nemotron_h_like(), "0.28.0").starts
