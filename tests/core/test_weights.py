"""Parameter counts and weight bytes against published figures (model cards, vLLM logs)."""

from __future__ import annotations

import pytest

from kvwise.core.catalog import catalog_entries, load_model
from kvwise.core.gpus import GIB
from kvwise.core.weights import count_params, weight_bytes_per_rank
from kvwise.errors import KvwiseError


def _published() -> list[tuple[str, int]]:
    # some published counts are model-card roundings ("70B"): hence the 2 % tolerance below
    out = []
    for entry in catalog_entries():
        try:
            entry.spec()
        except KvwiseError:
            continue  # architectures kvwise refuses (gpt-oss, DeepSeek-V2) have no count to check
        if entry.published_params:
            out.append((entry.model_id, entry.published_params))
    return out


@pytest.mark.parametrize(
    ("model_id", "published"),
    [
        ("Qwen/Qwen2.5-0.5B-Instruct", 494_032_768),
        ("Qwen/Qwen2.5-1.5B-Instruct", 1_543_714_304),
        ("Qwen/Qwen2.5-3B-Instruct", 3_085_938_688),
        ("Qwen/Qwen2.5-7B-Instruct", 7_615_616_512),
        ("Qwen/Qwen3-32B", 32_762_123_264),
        ("meta-llama/Llama-3.1-8B-Instruct", 8_030_261_248),
        ("meta-llama/Llama-3.2-1B-Instruct", 1_235_814_400),
        ("meta-llama/Llama-3.2-3B-Instruct", 3_212_749_824),
        ("01-ai/Yi-1.5-34B", 34_388_917_248),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", 32_763_876_352),
    ],
)
def test_param_count_equals_published_safetensors_total(model_id: str, published: int) -> None:
    assert count_params(load_model(model_id)) == published


def test_llama2_count_within_rounding_of_published() -> None:
    # the published 6,738,417,664 includes the rotary inv_freq buffers saved in the checkpoint
    assert abs(count_params(load_model("meta-llama/Llama-2-7b-hf")) - 6_738_417_664) <= 4096


def test_every_catalog_entry_with_a_published_count_is_within_two_percent() -> None:
    for model_id, published in _published():
        spec = load_model(model_id)
        total = count_params(spec)
        if spec.tie_word_embeddings:
            # some publishers count a tied embedding twice (Qwen3-0.6B: 751.6 M = 596 M + 155.6 M)
            total_untied = total + spec.vocab_size * spec.hidden_size
            assert min(abs(total - published), abs(total_untied - published)) / published < 0.01, (
                model_id
            )
        else:
            assert abs(total - published) / published < 0.02, model_id


@pytest.mark.parametrize(
    ("model_id", "tp", "logged_gib"),
    [
        # "Model loading took X GiB" in the vLLM 0.19 H100 sweep (llm-d-planner PR #205)
        ("meta-llama/Llama-3.1-8B-Instruct", 1, 14.99),
        ("meta-llama/Llama-3.1-8B-Instruct", 2, 7.51),
        ("Qwen/Qwen2.5-7B-Instruct", 4, 3.55),
        ("Qwen/Qwen3-30B-A3B", 1, 56.88),
        ("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", 2, 33.88),
        ("RedHatAI/Qwen2.5-7B-Instruct-quantized.w8a8", 1, 8.14),
        ("Qwen/Qwen2.5-72B-Instruct", 2, 67.8),
    ],
)
def test_weight_bytes_match_vllm_model_loading_line(
    model_id: str, tp: int, logged_gib: float
) -> None:
    spec = load_model(model_id)
    got = weight_bytes_per_rank(spec, tp=tp, dtype_bytes=2) / GIB
    assert got == pytest.approx(logged_gib, abs=0.1)


def test_awq_7b_loads_about_5_2_gib_because_embeddings_stay_16_bit() -> None:
    # ~2.03 GiB embed + lm_head + ~3.2 GiB int4 linears (vLLM's AWQ layout for a 7B)
    awq = weight_bytes_per_rank(load_model("Qwen/Qwen2.5-7B-Instruct-AWQ"), dtype_bytes=2) / GIB
    assert 5.0 < awq < 5.4


def test_tensor_parallel_splits_weights_but_replicates_norms() -> None:
    spec = load_model("Qwen/Qwen2.5-7B-Instruct")
    one, two = weight_bytes_per_rank(spec, tp=1), weight_bytes_per_rank(spec, tp=2)
    assert one / 2 < two < one / 2 * 1.01


@pytest.mark.parametrize(
    ("model_id", "logged_gib"),
    [
        # "Model loading took X GiB", vLLM 0.19: H100 (llm-d-planner PR #205) and A100 (myoceane.fr)
        ("openai/gpt-oss-20b", 13.64),
        ("openai/gpt-oss-20b", 13.72),
        # gpt-oss-120b on H100 with the Marlin MXFP4 backend (vllm#23278): 65.9651 GiB
        ("openai/gpt-oss-120b", 65.97),
        ("deepseek-ai/DeepSeek-V2-Lite-Chat", 29.43),
        ("mistralai/Mistral-Small-3.1-24B-Instruct-2503", 44.76),
    ],
)
def test_new_architectures_load_what_vllm_logged(model_id: str, logged_gib: float) -> None:
    got = weight_bytes_per_rank(load_model(model_id), tp=1, dtype_bytes=2) / GIB
    assert got == pytest.approx(logged_gib, abs=0.1)


def test_deepseek_v2_lite_counts_its_published_15_7b() -> None:
    # model card: "DeepSeek-V2-Lite has 15.7B parameters"
    assert count_params(load_model("deepseek-ai/DeepSeek-V2-Lite-Chat")) / 1e9 == pytest.approx(
        15.7, abs=0.05
    )


def test_expert_parallel_holds_whole_experts_without_per_shard_padding() -> None:
    # gpt-oss-20b MXFP4 experts at 4 ranks. TP: each expert's 2880 intermediate splits to 720,
    # padded to 768 (Marlin, multiple of 128); hidden 2880 -> 3072. EP: 8 whole experts per rank,
    # intermediate 2880 -> 2944. Per rank, 24 layers x experts x 3 matrices at 0.53125 B/param:
    #   TP: 24 x 32 x 3 x 3072 x 768 x 0.53125 = 2,887,778,304 B (+ bf16 biases 24 x 32 x 4608 x 2)
    #   EP: 24 x 8 x 3 x 3072 x 2944 x 0.53125 = 2,767,454,208 B (+ bf16 biases 24 x 8 x 8960 x 2)
    spec = load_model("openai/gpt-oss-20b")
    tp = weight_bytes_per_rank(spec, tp=4, dtype_bytes=2)
    ep = weight_bytes_per_rank(spec, tp=4, dtype_bytes=2, expert_parallel=True)
    tp_experts = 2_887_778_304 + 24 * 32 * 4608 * 2
    ep_experts = 2_767_454_208 + 24 * 8 * 8960 * 2
    assert tp - ep == tp_experts - ep_experts


def test_qwen3_next_counts_its_published_80b() -> None:
    from kvwise.core.models import spec_from_config
    from tests.planner.test_kv import QWEN3_NEXT

    # model card: "80B total parameters and 3B activated"
    total = count_params(spec_from_config(QWEN3_NEXT, "Qwen/Qwen3-Next-80B-A3B-Instruct"))
    assert total / 1e9 == pytest.approx(80, rel=0.02)


def test_deepseek_v3_counts_its_published_671b_main_model() -> None:
    from kvwise.core.models import spec_from_config
    from tests.planner.test_kv import DEEPSEEK_V3

    # DeepSeek-V3 README: "685B ... includes 671B of the Main Model weights and 14B of the
    # Multi-Token Prediction (MTP) Module weights"; vLLM loads the main model only
    total = count_params(spec_from_config(DEEPSEEK_V3, "deepseek-ai/DeepSeek-V3"))
    assert total / 1e9 == pytest.approx(671, rel=0.005)


def test_gpt_oss_120b_counts_what_llama_cpp_prints_for_it() -> None:
    # "model params = 116.83 B" (llama.cpp's loader, ollama issue #18373); model card: 116.83B
    assert count_params(load_model("openai/gpt-oss-120b")) / 1e9 == pytest.approx(116.83, abs=0.005)


def test_llama4_scout_counts_its_published_109b_with_the_vision_tower() -> None:
    spec = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert spec.vision is not None
    assert count_params(spec) / 1e9 == pytest.approx(109, rel=0.01)  # "17B active, 109B total"


def test_nemotron_h_layers_hold_one_block_each() -> None:
    from kvwise.core.models import spec_from_config
    from tests.planner.test_kv import _nemotron_h_like

    # M-M*M-M-: 4 Mamba2 mixers, 1 attention, 3 squared-ReLU MLPs, one norm per layer
    h, inner, conv = 1024, 32 * 64, 32 * 64 + 2 * 128
    mamba = h * (inner + conv + 32) + conv * 4 + conv + 3 * 32 + inner + inner * h
    attention = h * 8 * 128 * 2 + 2 * h * 2 * 128
    mlp = 2 * h * 4096
    embeddings = 2 * 1000 * h
    expected = 4 * mamba + attention + 3 * mlp + 8 * h + h + embeddings
    assert count_params(spec_from_config(_nemotron_h_like(), "x")) == expected


def test_jamba_layout_counts_its_published_52b_total_12b_active() -> None:
    from kvwise.core.models import spec_from_config
    from kvwise.core.weights import active_params

    # the Jamba paper's layout (arXiv 2403.19887, section 3): 32 layers of width 4096, attention
    # once per 8 layers (1:7 with Mamba), MoE every other layer with 16 experts, top-2;
    # "12B active parameters and 52B total available parameters"
    config = {
        "architectures": ["JambaForCausalLM"],
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 65536,
        "num_experts": 16,
        "num_experts_per_tok": 2,
        "attn_layer_period": 8,
        "attn_layer_offset": 4,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "mamba_dt_rank": 256,
        "torch_dtype": "bfloat16",
    }
    spec = spec_from_config(config, "jamba-like")
    assert count_params(spec) / 1e9 == pytest.approx(52, rel=0.01)
    assert active_params(spec) / 1e9 == pytest.approx(12, rel=0.02)


def test_deepseek_v2_layout_counts_its_published_236b_total_21b_active() -> None:
    from kvwise.core.models import spec_from_config
    from kvwise.core.weights import active_params

    # the DeepSeek-V2 paper's hyper-parameters (arXiv 2405.04434, section 3.1): 60 layers of 5120,
    # 128 heads, d_c 512, d_c' 1536, rope 64 (nope 128, v 128), 2 shared + 160 routed experts of
    # 1536, 6 routed per token, the first layer dense; "236B total parameters, 21B activated"
    config = {
        "architectures": ["DeepseekV2ForCausalLM"],
        "hidden_size": 5120,
        "num_hidden_layers": 60,
        "num_attention_heads": 128,
        "intermediate_size": 12288,
        "vocab_size": 102400,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "n_routed_experts": 160,
        "n_shared_experts": 2,
        "num_experts_per_tok": 6,
        "moe_intermediate_size": 1536,
        "first_k_dense_replace": 1,
        "torch_dtype": "bfloat16",
    }
    spec = spec_from_config(config, "deepseek-v2-like")
    assert count_params(spec) / 1e9 == pytest.approx(236, rel=0.005)
    assert active_params(spec) / 1e9 == pytest.approx(21, rel=0.02)


def test_a_read_checkpoint_size_replaces_the_modelled_one_split_the_same_way() -> None:
    from dataclasses import replace

    spec = load_model("Qwen/Qwen2.5-7B-Instruct")
    rotary = spec.max_position_embeddings * spec.head_dim * 2
    sized = replace(spec, checkpoint_weight_bytes=15 * GIB)
    assert weight_bytes_per_rank(sized, tp=1) == 15 * GIB + rotary
    modelled_share = (weight_bytes_per_rank(spec, tp=2) - rotary) / (
        weight_bytes_per_rank(spec, tp=1) - rotary
    )
    got_share = (weight_bytes_per_rank(sized, tp=2) - rotary) / (15 * GIB)
    assert got_share == pytest.approx(modelled_share, rel=1e-6)
