"""ModelOpt checkpoints (NVIDIA's NVFP4 / FP8 uploads): one scheme, or MIXED_PRECISION with one
per layer. The checkpoint read here is nvidia/Qwen3.6-35B-A3B-NVFP4's published config.json
(tests/data/hub_cache); the byte figures are vLLM 0.24.0's `modelopt.py` tensors, by hand."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kvwise.core.catalog import catalog_entries
from kvwise.core.models import spec_from_config
from kvwise.core.quant import parse_quantization
from kvwise.core.weights import weight_bytes_per_rank
from kvwise.errors import UnsupportedModelError

HUB = Path(__file__).resolve().parents[1] / "data" / "hub_cache"
NVFP4_CONFIG = next(
    (HUB / "models--nvidia--Qwen3.6-35B-A3B-NVFP4" / "snapshots").glob("*/config.json")
)


def _config() -> dict[str, Any]:
    return dict(json.loads(NVFP4_CONFIG.read_text()))


def test_mixed_precision_reads_one_scheme_per_part() -> None:
    quant = parse_quantization(_config()["quantization_config"], "nvidia/Qwen3.6-35B-A3B-NVFP4")
    assert quant is not None and quant.method == "modelopt"
    assert quant.scheme.startswith("MIXED_PRECISION")
    # attention and DeltaNet projections: FP8, 1 B per weight (+ one fp32 scale per tensor)
    assert (quant.bits, quant.bytes_per_param()) == (8, 1.0)
    # experts and lm_head: W4A16_NVFP4, uint8 [out, in/2] + fp8 scale per 16 weights
    assert quant.experts is not None and quant.lm_head is not None
    assert quant.experts.bytes_per_param() == quant.lm_head.bytes_per_param() == 0.5 + 1 / 16


def test_experts_and_lm_head_take_their_own_scheme() -> None:
    model = spec_from_config(_config(), "nvidia/Qwen3.6-35B-A3B-NVFP4")
    assert model.quant is not None
    whole = weight_bytes_per_rank(model)
    # lm_head 248,320 x 2,048 weights: 2 B each in bf16, 0.5625 B in NVFP4
    bf16_head = replace(model.quant, lm_head=None)
    assert weight_bytes_per_rank(model, quant=bf16_head) - whole == 248_320 * 2_048 * (2 - 0.5625)
    # experts 40 layers x 256 x 3 x 2,048 x 512 weights: 0.5625 B in NVFP4, 1 B if they were FP8
    fp8_experts = replace(model.quant, experts=None)
    experts = 40 * 256 * 3 * 2_048 * 512
    assert weight_bytes_per_rank(model, quant=fp8_experts) - whole == experts * (1 - 0.5625)
    # the shared expert of every layer, 3 x 2,048 x 512: NVFP4 too, not the attention's FP8
    fp8_shared = replace(model.quant, mlp=None)
    shared = 40 * 3 * 2_048 * 512
    assert weight_bytes_per_rank(model, quant=fp8_shared) - whole == shared * (1 - 0.5625)


def test_a_single_scheme_checkpoint_quantizes_every_linear() -> None:
    quant = parse_quantization(
        {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}, "some/NVFP4"
    )
    assert quant is not None and quant.scheme == "NVFP4" and quant.experts is None
    assert quant.lm_head is None  # only MIXED_PRECISION lists lm_head


def test_an_unknown_modelopt_scheme_is_refused_in_one_line() -> None:
    with pytest.raises(UnsupportedModelError, match="not modelled: quantization modelopt W4A8_AWQ"):
        parse_quantization({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "some/model")


def test_an_nvfp4_plan_does_not_carry_the_awq_marlin_warning() -> None:
    from kvwise.core.flags import VllmFlags
    from kvwise.core.gpus import find_gpu
    from kvwise.planner import plan

    model = spec_from_config(_config(), "nvidia/Qwen3.6-35B-A3B-NVFP4")
    result = plan(model, find_gpu("rtx5090"), VllmFlags(max_model_len=32768), vllm_version="0.24.0")
    assert result.flags.dtype == "bfloat16"
    assert not [w for w in result.warnings if "AWQ/GPTQ Marlin" in w]


def _dense_mixed_config() -> dict[str, Any]:
    """Qwen3.5-27B's published config with a quantization_config in the shape of
    nvidia/Qwen3.6-27B-NVFP4's (aiconfigurator's copy): FP8 attention and DeltaNet projections,
    W4A16_NVFP4 MLPs and lm_head."""
    config = next(e for e in catalog_entries() if e.model_id == "Qwen/Qwen3.5-27B").config
    layers: dict[str, dict[str, str]] = {"lm_head": {"quant_algo": "W4A16_NVFP4"}}
    for i, kind in enumerate(config["text_config"]["layer_types"]):
        prefix = f"model.language_model.layers.{i}"
        mixer = ("self_attn.q_proj",) if kind == "full_attention" else ("linear_attn.out_proj",)
        for name in mixer:
            layers[f"{prefix}.{name}"] = {"quant_algo": "FP8"}
        for name in ("gate_proj", "up_proj", "down_proj"):
            layers[f"{prefix}.mlp.{name}"] = {"quant_algo": "W4A16_NVFP4"}
    quant = {
        "quant_method": "modelopt",
        "quant_algo": "MIXED_PRECISION",
        "quantized_layers": layers,
    }
    return {**config, "quantization_config": quant}


def test_a_dense_checkpoint_gives_its_mlps_their_own_scheme() -> None:
    model = spec_from_config(_dense_mixed_config(), "nvidia/Qwen3.6-27B-NVFP4")
    assert model.quant is not None and model.quant.mlp is not None
    assert model.quant.bits == 8 and model.quant.mlp.bytes_per_param() == 0.5 + 1 / 16
    # the 64 gated MLPs, 3 x 5,120 x 17,408 weights each: 0.5625 B in NVFP4 instead of 1 B in FP8
    mlp = 64 * 3 * 5_120 * 17_408
    fp8_mlps = replace(model.quant, mlp=None)
    assert weight_bytes_per_rank(model, quant=fp8_mlps) - weight_bytes_per_rank(model) == (
        mlp * (1 - 0.5625)
    )


def test_mixed_schemes_within_the_attention_layers_are_refused_naming_both() -> None:
    layers = {
        "model.language_model.layers.3.self_attn.q_proj": {"quant_algo": "FP8"},
        "model.language_model.layers.3.self_attn.k_proj": {"quant_algo": "NVFP4"},
    }
    config = {
        "quant_method": "modelopt",
        "quant_algo": "MIXED_PRECISION",
        "quantized_layers": layers,
    }
    with pytest.raises(UnsupportedModelError, match="modelopt FP8/NVFP4 on the attention layers"):
        parse_quantization(config, "some/model")
