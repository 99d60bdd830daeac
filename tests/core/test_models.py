"""ModelSpec parsing: supported architectures, refusals, local configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvwise.core.catalog import load_model
from kvwise.core.models import FULL, SLIDING, spec_from_config
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


def test_unknown_architecture_is_refused_not_guessed() -> None:
    config = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168}
    with pytest.raises(UnsupportedModelError, match="not modelled"):
        spec_from_config(config, "deepseek-ai/DeepSeek-V3")


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
