"""ModelOpt checkpoints (NVIDIA's NVFP4 / FP8 uploads): one scheme, or MIXED_PRECISION with one
per layer. The checkpoint read here is nvidia/Qwen3.6-35B-A3B-NVFP4's published config.json
(tests/data/hub_cache); the byte figures are vLLM 0.24.0's `modelopt.py` tensors, by hand."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

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


def test_mixed_schemes_across_the_linear_layers_are_refused_naming_both() -> None:
    # the shape of nvidia/Qwen3.6-27B-NVFP4 (aiconfigurator's copy): FP8 attention, NVFP4 MLPs
    layers = {
        "model.language_model.layers.3.self_attn.q_proj": {"quant_algo": "FP8"},
        "model.language_model.layers.3.mlp.gate_proj": {"quant_algo": "W4A16_NVFP4"},
    }
    config = {
        "quant_method": "modelopt",
        "quant_algo": "MIXED_PRECISION",
        "quantized_layers": layers,
    }
    with pytest.raises(
        UnsupportedModelError, match="modelopt FP8/W4A16_NVFP4 on the linear layers"
    ):
        parse_quantization(config, "nvidia/Qwen3.6-27B-NVFP4")
