"""ModelSpec parsing: supported architectures, refusals, local configs."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from kvwise.core.catalog import load_model
from kvwise.core.models import FULL, SLIDING, spec_from_config
from kvwise.core.weights import count_params, is_experts_only
from kvwise.errors import DataError, UnknownModelError, UnsupportedModelError


def test_qwen25_7b_shapes_from_the_published_config() -> None:
    spec = load_model("Qwen/Qwen2.5-7B-Instruct")
    assert (spec.num_layers, spec.num_kv_heads, spec.head_dim, spec.vocab_size) == (
        28,
        4,
        128,
        152064,
    )
    assert spec.has_qkv_bias and not spec.tie_word_embeddings
    assert spec.max_position_embeddings == 32768 and spec.dtype == "bfloat16"


def test_catalog_finds_names_without_the_organisation_and_in_any_case() -> None:
    assert load_model("qwen2.5-7b-instruct").model_id == "Qwen/Qwen2.5-7B-Instruct"


def test_gemma3_alternates_five_sliding_layers_with_one_global() -> None:
    spec = load_model("google/gemma-3-27b-it")
    types = spec.attention_layer_types
    assert types[:6] == (SLIDING,) * 5 + (FULL,)
    assert types.count(FULL) == 10 and spec.sliding_window == 1024


def test_unknown_architecture_is_refused_in_one_line_naming_it() -> None:
    config = {"architectures": ["RwkvForCausalLM"], "hidden_size": 4096}
    with pytest.raises(UnsupportedModelError, match="architecture RwkvForCausalLM is not modelled"):
        spec_from_config(config, "RWKV/rwkv-4-world-7b")


def test_local_config_json_and_directory(tmp_path: Path) -> None:
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "vocab_size": 2048,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert load_model(str(tmp_path)).head_dim == 64
    assert load_model(str(tmp_path / "config.json")).num_kv_heads == 2


def test_broken_local_config_is_a_data_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(DataError):
        load_model(str(tmp_path))


def test_unknown_model_names_the_closest_catalog_entries() -> None:
    with pytest.raises(UnknownModelError, match=r"Qwen/Qwen2\.5-7B-Instruct"):
        load_model("Qwen/Qwen2.5-7B-Instrct")


def test_gpt_oss_reads_its_window_sinks_and_mxfp4_experts() -> None:
    spec = load_model("openai/gpt-oss-20b")
    assert spec.attention_layer_types[:2] == (SLIDING, FULL) and spec.sliding_window == 128
    assert spec.has_attention_sinks and spec.quant is not None and spec.quant.method == "mxfp4"
    assert is_experts_only(spec.quant)  # attention and router stay bf16
    assert spec.quant.bytes_per_param() == 0.5 + 1 / 32  # E2M1 pairs + E8M0 per 32


def test_multimodal_plan_names_the_part_it_does_not_model() -> None:
    from kvwise.core.flags import VllmFlags
    from kvwise.core.gpus import find_gpu
    from kvwise.planner import plan

    result = plan(
        load_model("mistralai/Mistral-Small-3.1-24B-Instruct-2503"),
        find_gpu("H100"),
        VllmFlags(max_model_len=8192),
        vllm_version="0.19.0",
    )
    assert any("vision encoder profiling" in p for p in result.to_json()["not_modelled"])
    text_only = plan(
        load_model("Qwen/Qwen2.5-7B-Instruct"),
        find_gpu("H100"),
        VllmFlags(),
        vllm_version="0.19.0",
    ).to_json()["not_modelled"]
    # a text model has no encoder part; what remains is the set-up's (a cold torch.compile)
    assert not any("vision" in part or "encoder" in part for part in text_only)
    assert all("torch.compile" in part for part in text_only)


def test_kimi_k2_and_qwen3_next_plan_from_the_catalog() -> None:
    kimi = load_model("moonshotai/Kimi-K2-Instruct")
    assert kimi.mla is not None and kimi.num_kv_heads == 1 and kimi.head_dim == 512 + 64
    assert kimi.moe is not None and kimi.moe.num_dense_layers == 1
    qwen = load_model("Qwen/Qwen3-Next-80B-A3B-Thinking")
    assert qwen.attention_layer_types[:4] == ("mamba", "mamba", "mamba", FULL)
    assert qwen.num_attention_layers == 12


@pytest.mark.parametrize(
    "architecture",
    ["FalconH1ForCausalLM", "MllamaForConditionalGeneration"],
)
def test_known_but_unmodelled_architectures_say_which_part(architecture: str) -> None:
    with pytest.raises(UnsupportedModelError, match=f"architecture {architecture}: not modelled: "):
        spec_from_config({"architectures": [architecture]}, "some/model")


def test_granite_4_hybrid_reads_mamba_layers_experts_and_no_rope() -> None:
    # keys as GraniteMoeHybridConfig names them; small numbers
    config = {
        "architectures": ["GraniteMoeHybridForCausalLM"],
        "hidden_size": 512,
        "num_hidden_layers": 4,
        "layer_types": ["mamba", "mamba", "mamba", "attention"],
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 256,
        "shared_intermediate_size": 1024,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 1000,
        "mamba_n_heads": 16,
        "mamba_d_head": 64,
        "mamba_d_state": 128,
        "mamba_n_groups": 1,
        "mamba_d_conv": 4,
        "position_embedding_type": "nope",
        "torch_dtype": "bfloat16",
    }
    spec = spec_from_config(config, "granite-like")
    assert spec.attention_layer_types == ("mamba", "mamba", "mamba", FULL)
    assert spec.moe is not None and spec.moe.shared_expert_intermediate_size == 1024
    assert spec.partial_rotary_factor == 0.0 and spec.tie_word_embeddings


def test_a_variant_that_is_not_modelled_is_one_line_naming_model_and_part() -> None:
    # DeepSeek-V3.2 adds a sparse-attention indexer (`index_topk`) with its own key cache
    config = {"architectures": ["DeepseekV3ForCausalLM"], "index_topk": 2048}
    with pytest.raises(UnsupportedModelError) as info:
        spec_from_config(config, "deepseek-ai/DeepSeek-V3.2-Exp")
    assert str(info.value).startswith("deepseek-ai/DeepSeek-V3.2-Exp: not modelled: DeepSeek-V3.2")
    assert "\n" not in str(info.value)


# First-generation Qwen, config.json as published (huggingface.co/Qwen/Qwen-7B, -14B, -72B:
# hidden_size, intermediate_size counting gate and up together, seq_length below
# max_position_embeddings); published sizes 7.72B, 14.2B, 72.3B.
def _qwen_v1(hidden: int, layers: int, heads: int, intermediate: int, vocab: int) -> dict:  # type: ignore[type-arg]
    return {
        "architectures": ["QWenLMHeadModel"],
        "model_type": "qwen",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "kv_channels": hidden // heads,
        "intermediate_size": intermediate,
        "vocab_size": vocab,
        "max_position_embeddings": 32768,
        "seq_length": 8192,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


@pytest.mark.parametrize(
    ("shapes", "published_b"),
    [
        ((4096, 32, 32, 22016, 151936), 7.72),  # Qwen-7B
        ((5120, 40, 40, 27392, 152064), 14.2),  # Qwen-14B
        ((8192, 80, 64, 49152, 152064), 72.3),  # Qwen-72B
    ],
)
def test_qwen_v1_reads_halved_mlp_and_matches_published_sizes(
    shapes: tuple[int, int, int, int, int], published_b: float
) -> None:
    spec = spec_from_config(_qwen_v1(*shapes), "Qwen/Qwen-x")
    assert spec.intermediate_size == shapes[3] // 2  # qwen.py: QWenMLP(intermediate_size // 2)
    assert spec.num_kv_heads == spec.num_attention_heads  # multi-head attention
    assert spec.max_position_embeddings == 8192  # vLLM takes the smallest length key
    assert abs(count_params(spec) / 1e9 - published_b) / published_b < 0.005


def test_qwen_v1_old_key_names_and_the_visual_variant() -> None:
    old = {
        "architectures": ["QWenLMHeadModel"],
        "n_embd": 4096,
        "n_layer": 32,
        "n_head": 32,
        "ffn_hidden_size": 22016,
        "vocab_size": 151936,
        "seq_length": 2048,
    }
    spec = spec_from_config(old, "Qwen/Qwen-7B-Chat")
    assert (spec.hidden_size, spec.num_layers, spec.intermediate_size) == (4096, 32, 11008)
    assert spec.max_position_embeddings == 2048
    with pytest.raises(UnsupportedModelError, match="not modelled: Qwen-VL's visual tower"):
        spec_from_config(_qwen_v1(4096, 32, 32, 22016, 151936) | {"visual": {}}, "Qwen/Qwen-VL")


def _minicpmv_26(**extra: object) -> dict:  # type: ignore[type-arg]
    # MiniCPM-V 2.6 = Qwen2-7B + SigLIP-400M (so400m-patch14 shapes, 980-pixel positions) +
    # a 64-query resampler (OpenBMB's model card: "built on SigLip-400M and Qwen2-7B, 8B")
    raw = resources.files("kvwise.core").joinpath("data/models/Qwen--Qwen2-7B-Instruct.json")
    text = json.loads(raw.read_text())["config"]
    vision = {
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_hidden_layers": 27,
        "patch_size": 14,
        "image_size": 980,
        "num_attention_heads": 16,
    }
    return (
        text
        | {
            "architectures": ["MiniCPMV"],
            "model_type": "minicpmv",
            "version": 2.6,
            "query_num": 64,
            "vision_config": vision,
            "vocab_size": 151666,
        }
        | extra
    )


def test_minicpm_v_2_6_is_qwen2_with_a_siglip_tower_and_resampler() -> None:
    spec = spec_from_config(_minicpmv_26(), "openbmb/MiniCPM-V-2_6")
    assert spec.has_qkv_bias and spec.num_kv_heads == 4  # Qwen2ForCausalLM's layout
    assert spec.vision is not None
    assert abs(count_params(spec) / 1e9 - 8.1) / 8.1 < 0.01
    # Resampler2_5's 70 x 70 sin-cos table, in the model dtype, counts as memory, not parameters
    assert spec.vision.num_buffer_elements == 70 * 70 * 3584


@pytest.mark.parametrize("version", [None, 2.5, 4.0])
def test_minicpm_v_other_versions_are_refused_naming_the_version(version: object) -> None:
    config = _minicpmv_26()
    config.pop("version")
    if version is not None:
        config["version"] = version
    with pytest.raises(UnsupportedModelError, match="not modelled: MiniCPM-V version"):
        spec_from_config(config, "openbmb/MiniCPM-V")


def test_granite_plans_like_llama_with_its_published_size() -> None:
    # ibm-granite/granite-3.1-8b-instruct's config.json as published (tests/data/hub_cache, source
    # in its SOURCE.md): the hub page gives 8.17B parameters, and vLLM 0.19.0 logged 15.25 GiB of
    # bfloat16 weights for it (in-sample record llmd-granite-31-8b-h100-tp1-8k).
    folder = (
        Path(__file__).parents[1] / "data/hub_cache/models--ibm-granite--granite-3.1-8b-instruct"
    )
    config = json.loads(next(folder.glob("snapshots/*/config.json")).read_text())
    spec = spec_from_config(config, "ibm-granite/granite-3.1-8b-instruct")
    assert (spec.num_layers, spec.num_kv_heads, spec.tie_word_embeddings) == (40, 8, True)
    assert abs(count_params(spec) / 1e9 - 8.17) / 8.17 < 0.005
    assert abs(count_params(spec) * 2 / 2**30 - 15.25) < 0.05


def test_each_architecture_has_one_reader_whichever_table_is_imported_first() -> None:
    """models.py answers dense and multimodal architectures without importing the MoE and
    hybrid tables: that gives every model the reader of the full table only while no
    architecture is in two tables, nor both read and refused as not modelled."""
    from kvwise.core import models
    from kvwise.core.models_dense import DENSE_ARCHITECTURES
    from kvwise.core.models_gemma4 import GEMMA4_ARCHITECTURES
    from kvwise.core.models_hybrid import HYBRID_ARCHITECTURES, NOT_MODELLED_ARCHITECTURES
    from kvwise.core.models_moe import MOE_ARCHITECTURES

    tables = (
        DENSE_ARCHITECTURES,
        models.MULTIMODAL_ARCHITECTURES,
        MOE_ARCHITECTURES,
        HYBRID_ARCHITECTURES,
        GEMMA4_ARCHITECTURES,
    )
    names = [name for table in tables for name in table]
    assert len(names) == len(set(names)) == len(models.architectures())
    assert not set(names) & set(NOT_MODELLED_ARCHITECTURES)
