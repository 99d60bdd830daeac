"""Gemma 4 plans from its published config (google/gemma-4-26B-A4B, tests/data/hub_cache).

Expected figures are derived here from the config itself (layer_types, head sizes, KV heads),
the way vLLM's gemma4.py reads it, not copied from kvwise's output.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest

from kvwise.cli import main
from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GIB, find_gpu
from kvwise.core.models import spec_from_config
from kvwise.core.weights import count_params, param_groups, weight_bytes_per_rank
from kvwise.errors import UnsupportedModelError
from kvwise.planner import plan
from tests.planner.accuracy import HUB_CACHE, emulated_hub

REPO = "google/gemma-4-26B-A4B"
CONFIG_PATH = next(
    (HUB_CACHE / "models--google--gemma-4-26B-A4B" / "snapshots").glob("*/config.json")
)


@pytest.fixture(autouse=True)
def _hub() -> Iterator[None]:
    with emulated_hub():
        yield


def _config() -> dict[str, Any]:
    return json.loads(CONFIG_PATH.read_text())


def _kv_bytes_per_token(cfg: dict[str, Any], tp: int, dtype_bytes: int = 2) -> int:
    """K and V per layer from the config: sliding layers head_dim x num_key_value_heads, full
    layers global_head_dim x num_global_key_value_heads (attention_k_eq_v); heads split over TP,
    at least one per rank."""
    text = cfg["text_config"]
    total = 0
    for kind in text["layer_types"]:
        if kind == "full_attention":
            head, heads = text["global_head_dim"], text["num_global_key_value_heads"]
        else:
            head, heads = text["head_dim"], text["num_key_value_heads"]
        total += 2 * max(1, heads // tp) * head * dtype_bytes
    return total


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_kv_bytes_per_token_follow_the_layer_pattern(tp: int) -> None:
    result = plan(
        load_model(REPO),
        find_gpu("h100"),
        VllmFlags(tensor_parallel_size=tp, max_model_len=32768),
        vllm_version="0.19.0",
    )
    assert result.kv.bytes_per_token == _kv_bytes_per_token(_config(), tp)


def test_full_layers_take_larger_blocks_so_every_page_is_the_sliding_one() -> None:
    """vLLM 0.19+ `unify_kv_cache_spec_page_size`: the full layers' page (2 KV heads x 512) is
    half the sliding one (8 x 256), so their block holds 32 tokens; 25 sliding + 5 full layers
    make 6 groups of 5 layers, each block one sliding page per layer of a group."""
    text = _config()["text_config"]
    kinds = text["layer_types"]
    num_full = kinds.count("full_attention")
    sliding_page_token = 2 * text["num_key_value_heads"] * text["head_dim"] * 2
    full_page_token = 2 * text["num_global_key_value_heads"] * text["global_head_dim"] * 2
    full_block = 16 * sliding_page_token // full_page_token
    length, mnbt, window = 65536, 8192, text["sliding_window"]
    result = plan(
        load_model(REPO),
        find_gpu("h100"),
        VllmFlags(max_model_len=length, max_num_batched_tokens=mnbt),
        vllm_version="0.19.0",
    )
    assert result.kv.bytes_per_block == num_full * 16 * sliding_page_token
    sliding_groups = math.ceil(kinds.count("sliding_attention") / num_full)
    # a sliding group keeps window - 1 tokens plus two scheduled batches in flight, + 1 block
    sliding_blocks = math.ceil(min(window - 1 + 2 * mnbt, length) / 16) + 1
    expected = math.ceil(length / full_block) + sliding_groups * sliding_blocks
    assert result.kv.blocks_per_request == expected


def test_weights_count_the_published_parameters() -> None:
    model = load_model(REPO)
    groups = param_groups(model)
    text = count_params(model) - groups.vision
    # model card: "25.2B total parameters" (the text model; the vision encoder is ~550M more).
    # kvwise counts vLLM's V slice on the 5 full layers (K loaded into it, attention_k_eq_v),
    # 5 x 2 x 512 x 2816 = 14.4M parameters the checkpoint does not store.
    assert text / 1e9 == pytest.approx(25.2, rel=0.005)
    assert 0.5e9 < groups.vision < 0.6e9


def test_weights_match_what_vllm_logged_for_this_checkpoint() -> None:
    # in-sample log (tests/data/validation, myoceane-gemma4-26b-a4b-a100-131k): "Model loading
    # took 48.5 GiB"; no weight constant is fitted, so this checks the count, not a fit
    loaded = weight_bytes_per_rank(load_model(REPO), tp=1, dtype_bytes=2) / GIB
    assert loaded == pytest.approx(48.5, rel=0.01)


def test_release_before_gemma4_support_is_refused_with_the_first_release() -> None:
    with pytest.raises(UnsupportedModelError, match=r"0\.18\.1.*from 0\.19\.0 on"):
        plan(load_model(REPO), find_gpu("h100"), VllmFlags(), vllm_version="0.18.1")


def test_cli_plans_gemma4_and_names_the_vision_profile_allowance(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", REPO, "--gpu", "h100", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["starts"] is True
    assert data["kv"]["bytes_per_token"] == _kv_bytes_per_token(_config(), 1)
    assert any("vision encoder profiling" in line for line in data["not_modelled"])


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"hidden_size_per_layer_input": 256}, "per-layer embeddings"),
        ({"num_kv_shared_layers": 10}, "KV sharing"),
    ],
)
def test_unmodelled_text_parts_are_named(change: dict[str, Any], named: str) -> None:
    cfg = copy.deepcopy(_config())
    cfg["text_config"].update(change)
    with pytest.raises(UnsupportedModelError, match=f"not modelled: Gemma 4 {named}"):
        spec_from_config(cfg, "gemma-4-variant")


def test_audio_tower_is_named_not_modelled() -> None:
    cfg = copy.deepcopy(_config())
    cfg["audio_config"] = {"hidden_size": 1024}
    with pytest.raises(UnsupportedModelError, match="not modelled: Gemma 4's audio tower"):
        spec_from_config(cfg, "gemma-4-with-audio")


def test_sglang_refuses_gemma4_naming_the_mixed_head_shapes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", REPO, "--gpu", "h100", "--engine", "sglang"]) != 0
    assert "not modelled: SGLang's KV pool for attention layers of different head shapes" in (
        capsys.readouterr().err
    )


def _dense_31b_shapes() -> dict[str, Any]:
    """The dense gemma-4 layout: the published 26B-A4B config with its experts removed and the
    31B's text shapes (hidden 5376, 60 layers, 32 heads, 16 KV heads on sliding layers, 4 on
    full ones, intermediate 21504) as public Gemma 4 loaders quote them; no published 31B
    config.json is in tests/data/hub_cache, so this checks the dense code path, not a checkpoint."""
    cfg = copy.deepcopy(_config())
    text = cfg["text_config"]
    for key in ("num_experts", "top_k_experts", "moe_intermediate_size"):
        text[key] = None
    pattern = ["sliding_attention"] * 5 + ["full_attention"]
    text |= {
        "enable_moe_block": False,
        "hidden_size": 5376,
        "num_hidden_layers": 60,
        "intermediate_size": 21504,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "num_global_key_value_heads": 4,
        "layer_types": pattern * 10,
    }
    return cfg


@pytest.mark.parametrize("tp", [1, 8])
def test_dense_gemma4_plans_with_its_own_kv_heads(tp: int) -> None:
    cfg = _dense_31b_shapes()
    model = spec_from_config(cfg, "gemma-4-dense")
    assert model.moe is None
    result = plan(
        model,
        find_gpu("h100"),
        VllmFlags(tensor_parallel_size=tp, max_model_len=32768),
        vllm_version="0.28.0",
    )
    # at TP 8 the full layers' 4 KV heads are replicated to one per rank
    assert result.kv.bytes_per_token == _kv_bytes_per_token(cfg, tp)
