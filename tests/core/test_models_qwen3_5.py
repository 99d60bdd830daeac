"""Qwen3.5 / 3.6 / 3.8 (Qwen3_5ForConditionalGeneration and its MoE sibling): hybrid gated
DeltaNet + full attention, a Qwen3-VL vision tower; configs from the offline catalog (published
config.json copies)."""

from __future__ import annotations

import copy
import json

import pytest

from kvwise.cli import main
from kvwise.core.catalog import catalog_entries, load_model
from kvwise.core.model_spec import FULL, MAMBA
from kvwise.core.models import spec_from_config
from kvwise.planner.kv import kv_layout
from kvwise.planner.kv_mamba import mamba_page_bytes


def _config(model_id: str) -> dict[str, object]:
    entry = next(e for e in catalog_entries() if e.model_id == model_id)
    return copy.deepcopy(entry.config)


def test_full_attention_is_every_fourth_layer_as_layer_types_say() -> None:
    model = load_model("Qwen/Qwen3.5-27B")
    kinds = model.attention_layer_types
    assert len(kinds) == 64 and model.num_attention_layers == 16
    assert [i for i, kind in enumerate(kinds) if kind == FULL] == list(range(3, 64, 4))
    assert kinds.count(MAMBA) == 48
    # gated attention (q_proj also emits a gate), rotary on a quarter of the 256-wide heads
    assert model.has_output_gate and model.partial_rotary_factor == 0.25


def test_deltanet_state_per_layer_follows_vllms_state_shape() -> None:
    # vLLM 0.32.0, mamba_utils.py gated_delta_net_state_shape for Qwen3.5-27B (16 key heads,
    # 48 value heads, both 128 wide, conv kernel 4), by hand:
    #   conv: (4 - 1) x (128 x 16 x 2 + 128 x 48) / tp channels = 3 x 10,240 / tp, model dtype (2 B)
    #   temporal: 48 / tp heads x 128 x 128 in float32 (4 B): the config's mamba_ssm_dtype, which
    #   Qwen3_5ForConditionalGenerationConfig copies into mamba_ssm_cache_dtype (vLLM PR #34489)
    model = load_model("Qwen/Qwen3.5-27B")
    assert mamba_page_bytes(model, 1) == 3 * 10_240 * 2 + 48 * 128 * 128 * 4 == 3_207_168
    assert mamba_page_bytes(model, 2) == 3 * 5_120 * 2 + 24 * 128 * 128 * 4 == 1_603_584


def test_without_mamba_ssm_dtype_the_state_stays_in_the_model_dtype() -> None:
    config = _config("Qwen/Qwen3.5-27B")
    del config["text_config"]["mamba_ssm_dtype"]  # type: ignore[attr-defined]
    model = spec_from_config(config, "Qwen/Qwen3.5-27B")
    assert mamba_page_bytes(model, 1) == 3 * 10_240 * 2 + 48 * 128 * 128 * 2


def test_attention_pages_grow_to_hold_one_deltanet_state() -> None:
    # one full-attention layer, one token, bf16: 4 KV heads x (256 + 256) x 2 B = 4,096 B;
    # block = 16 x cdiv(3,207,168, 16 x 4,096) = 16 x 49 = 784 tokens, page 784 x 4,096;
    # 16 attention + 48 DeltaNet layers -> groups of 16: one attention group, three state groups
    model = load_model("Qwen/Qwen3.5-27B")
    layout = kv_layout(model, tp=1, pp=1, block_size=16, dtype_bytes=2)
    assert layout.block_size == 784 and layout.page_bytes == 784 * 4_096
    assert [g.kind for g in layout.groups] == [FULL, MAMBA, MAMBA, MAMBA]
    assert layout.bytes_per_token == 16 * 4_096


def test_vision_tower_counts_qwen3_vl_modules() -> None:
    # Qwen3_VisionTransformer (vLLM qwen3_vl.py) for hidden 1152, MLP 4304, 27 blocks, patch 16,
    # temporal patch 2, 2304 positions, merge 2, out 5120, no deepstack mergers, by hand:
    #   patch_embed Conv3d 3 x 2 x 16 x 16 x 1152 + 1152           =     1,770,624
    #   pos_embed 2304 x 1152                                        =     2,654,208
    #   per block: 2 LayerNorms 4,608; qkv 1152 x 3456 + 3456; proj 1152^2 + 1152;
    #     fc1 1152 x 4304 + 4304; fc2 4304 x 1152 + 1152            = 15,239,504 x 27
    #   merger: LayerNorm 2,304; fc1 4608^2 + 4608; fc2 4608 x 5120 + 5120 = 44,838,656
    model = load_model("Qwen/Qwen3.5-27B")
    assert model.vision is not None
    assert model.vision.num_params == 1_770_624 + 2_654_208 + 27 * 15_239_504 + 44_838_656


def test_a_config_without_architectures_is_read_by_its_model_type() -> None:
    config = _config("Qwen/Qwen3.5-35B-A3B")
    del config["architectures"]
    model = spec_from_config(config, "Qwen/Qwen3.5-35B-A3B")
    assert model.architecture == "Qwen3_5MoeForConditionalGeneration" and model.moe is not None


def test_moe_sibling_reads_experts_on_every_layer() -> None:
    model = load_model("Qwen/Qwen3.5-35B-A3B")
    assert model.moe is not None
    assert (model.moe.num_experts, model.moe.num_experts_per_tok) == (256, 8)
    assert model.moe.expert_intermediate_size == 512
    assert model.moe.shared_expert_intermediate_size == 512 and model.moe.has_shared_expert_gate
    assert model.num_attention_layers == 10 and model.vision is not None


def test_plan_names_what_it_does_not_model(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "Qwen/Qwen3.5-27B", "--gpu", "H100", "--max-model-len", "32768", "--json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["starts"] is True
    # attention KV grows with context only on the 16 attention layers; the block holds one state
    assert data["kv"]["bytes_per_token"] == 16 * 4_096 and data["kv"]["block_size"] == 784
    not_modelled = " ".join(data["not_modelled"])
    assert "vision encoder" in not_modelled and "prefix caching" in not_modelled
