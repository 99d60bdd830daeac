"""Quantization configs as checkpoints publish them, read into bytes per parameter; each figure is
checked against one derived independently: a published checkpoint size or vLLM log, or the
tensors vLLM's `create_weights` allocates for one real layer (shapes written out here)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kvwise.core.gpus import GIB
from kvwise.core.models import spec_from_config
from kvwise.core.quant import QuantSpec, parse_quantization
from kvwise.core.weights import weight_bytes_per_rank
from kvwise.errors import UnsupportedModelError
from tests.core.checkpoints import QWEN_AWQ, catalog_config

# --- quantization_config blocks, in the shape their publishers' config.json files use ---------
# Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4
QWEN_GPTQ_INT4 = {
    "bits": 4,
    "damp_percent": 0.01,
    "desc_act": False,
    "group_size": 128,
    "quant_method": "gptq",
    "sym": True,
    "true_sequential": True,
}
# an AutoRound export with GPTQ packing (Intel/*-int4-inc uploads)
AUTO_ROUND = {
    "bits": 4,
    "data_type": "int",
    "group_size": 128,
    "sym": True,
    "packing_format": "auto_round:auto_gptq",
    "quant_method": "auto-round",
}
# unsloth/*-bnb-4bit
UNSLOTH_BNB = {
    "bnb_4bit_compute_dtype": "bfloat16",
    "bnb_4bit_quant_type": "nf4",
    "bnb_4bit_use_double_quant": True,
    "llm_int8_skip_modules": ["lm_head"],
    "load_in_4bit": True,
    "load_in_8bit": False,
    "quant_method": "bitsandbytes",
}
BNB_8BIT = {"load_in_8bit": True, "load_in_4bit": False, "quant_method": "bitsandbytes"}
# Qwen/Qwen3-8B-FP8
QWEN3_FP8 = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "modules_to_not_convert": ["lm_head"],
    "quant_method": "fp8",
    "weight_block_size": [128, 128],
}


def _ct(weights: dict[str, Any], inputs: dict[str, Any] | None, fmt: str) -> dict[str, Any]:
    """A compressed-tensors config as llm-compressor writes it (RedHatAI / neuralmagic uploads)."""
    group: dict[str, Any] = {"targets": ["Linear"], "weights": weights}
    if inputs:
        group["input_activations"] = inputs
    return {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "ignore": ["lm_head"],
        "config_groups": {"group_0": group},
    }


TOKEN_INT8 = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True}
TOKEN_FP8 = TOKEN_INT8 | {"type": "float"}
CT_W8A8 = _ct(
    {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"},
    TOKEN_INT8,
    "int-quantized",
)
CT_FP8_DYNAMIC = _ct(
    {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"},
    TOKEN_FP8,
    "float-quantized",
)
CT_FP8_BLOCK = _ct(
    {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
    TOKEN_FP8,
    "float-quantized",
)
CT_W4A16 = _ct(
    {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128},
    None,
    "pack-quantized",
)
NVFP4_WEIGHTS = {
    "num_bits": 4,
    "type": "float",
    "symmetric": True,
    "strategy": "tensor_group",
    "group_size": 16,
}
CT_NVFP4 = _ct(NVFP4_WEIGHTS, NVFP4_WEIGHTS | {"dynamic": "local"}, "nvfp4-pack-quantized")


def _quant(qc: dict[str, Any]) -> QuantSpec:
    quant = parse_quantization(qc, "test/model")
    assert quant is not None
    return quant


def _layer_bytes(quant: QuantSpec, d_in: int, d_out: int) -> float:
    """Bytes of one [d_out, d_in] linear as kvwise counts it (per-channel scales by row)."""
    return d_in * d_out * quant.bytes_per_param() + d_out * quant.per_channel_scale_bytes()


# One Qwen2.5-7B down_proj: in 18944, out 3584. Bytes of the tensors each vLLM method allocates
# (vllm/model_executor/layers/quantization/*, v0.11.0), written out tensor by tensor:
IN, OUT = 18944, 3584
LAYOUTS: list[tuple[str, dict[str, Any], int]] = [
    # awq.py: qweight int32 [in, out/8], qzeros int32 [in/128, out/8], scales fp16 [in/128, out]
    ("AWQ", QWEN_AWQ, IN * OUT // 8 * 4 + IN // 128 * OUT // 8 * 4 + IN // 128 * OUT * 2),
    # gptq.py: qweight int32 [in/8, out], qzeros int32 [in/128, out/8], scales fp16 [in/128, out]
    ("GPTQ", QWEN_GPTQ_INT4, IN // 8 * OUT * 4 + IN // 128 * OUT // 8 * 4 + IN // 128 * OUT * 2),
    # auto_round.py hands the layer to gptq_marlin: the GPTQ tensors above
    ("AutoRound", AUTO_ROUND, IN // 8 * OUT * 4 + IN // 128 * OUT // 8 * 4 + IN // 128 * OUT * 2),
    # bitsandbytes.py: uint8 [in*out/2, 1]; loader keeps one fp32 absmax per 64 weights
    ("bnb nf4", UNSLOTH_BNB, IN * OUT // 2 + IN * OUT // 64 * 4),
    # bitsandbytes.py 8-bit: int8 [out, in] + fp32 SCB per output row
    ("bnb int8", BNB_8BIT, IN * OUT + OUT * 4),
    # fp8.py: fp8 [out, in] + fp32 weight_scale_inv [ceil(out/128), ceil(in/128)]
    ("FP8 block", QWEN3_FP8, IN * OUT + -(-OUT // 128) * -(-IN // 128) * 4),
    # compressed_tensors_w8a8_int8.py: int8 [out, in] + fp32 channel scale [out, 1]
    ("CT W8A8", CT_W8A8, IN * OUT + OUT * 4),
    # compressed_tensors_w8a8_fp8.py: fp8 [out, in] + fp32 channel scale [out, 1]
    ("CT FP8 dynamic", CT_FP8_DYNAMIC, IN * OUT + OUT * 4),
    # compressed_tensors_w8a8_fp8.py, block strategy: fp32 [ceil(out/128), ceil(in/128)]
    ("CT FP8 block", CT_FP8_BLOCK, IN * OUT + -(-OUT // 128) * -(-IN // 128) * 4),
    # compressed_tensors_wNa16.py: int32 [out, in/8] + bf16 scales [out, in/128]
    ("CT W4A16", CT_W4A16, OUT * IN // 8 * 4 + OUT * IN // 128 * 2),
    # compressed_tensors_w4a4_nvfp4.py: uint8 [out, in/2] + fp8 [out, in/16] (+ 2 fp32 globals)
    ("CT NVFP4", CT_NVFP4, OUT * IN // 2 + OUT * IN // 16 + 8),
]


@pytest.mark.parametrize(("scheme", "qc", "vllm_bytes"), LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_layer_bytes_match_the_tensors_vllm_allocates(
    scheme: str, qc: dict[str, Any], vllm_bytes: int
) -> None:
    # within 0.1 %: per-tensor scales (a few bytes a layer) are not counted
    assert _layer_bytes(_quant(qc), IN, OUT) == pytest.approx(vllm_bytes, rel=1e-3)


@pytest.mark.parametrize(
    ("total_params", "checkpoint_gib", "num_layers", "num_experts"),
    [
        # OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card" (2025), table 1: total parameters and
        # checkpoint size. Experts: num_layers x num_experts x (gate_up 2880x5760 + down 2880x2880)
        (20_910_000_000, 12.8, 24, 32),  # gpt-oss-20b
        (116_830_000_000, 60.8, 36, 128),  # gpt-oss-120b
    ],
)
def test_mxfp4_experts_bytes_reproduce_gpt_oss_published_checkpoint_sizes(
    total_params: int, checkpoint_gib: float, num_layers: int, num_experts: int
) -> None:
    quant = _quant(catalog_config("openai/gpt-oss-20b")["quantization_config"])
    assert quant.is_experts_only  # attention and router stay bf16 (mxfp4.py: UnquantizedLinear)
    expert_params = num_layers * num_experts * 3 * 2880 * 2880
    other_bf16_bytes = (total_params - expert_params) * 2
    total_bytes = expert_params * quant.bytes_per_param() + other_bf16_bytes
    assert total_bytes / GIB == pytest.approx(checkpoint_gib, abs=0.05)


@pytest.mark.parametrize(
    ("base", "qc", "tp", "logged_gib"),
    [
        # "Model loading took X GiB", vLLM 0.19 on H100 (llm-d-planner accuracy logs, in
        # tests/data/validation/vllm_startup_logs.jsonl: llmd-qwen25-7b-w8a8-h100-tp1-8k,
        # llmd-llama33-70b-fp8dyn-h100-tp2-8k)
        ("Qwen/Qwen2.5-7B-Instruct", CT_W8A8, 1, 8.14),
        ("meta-llama/Llama-3.3-70B-Instruct", CT_FP8_DYNAMIC, 2, 33.88),
    ],
)
def test_compressed_tensors_checkpoints_match_vllm_loading_line(
    base: str, qc: dict[str, Any], tp: int, logged_gib: float
) -> None:
    spec = spec_from_config(catalog_config(base) | {"quantization_config": qc}, "test/model")
    weights_gib = weight_bytes_per_rank(spec, tp=tp, dtype_bytes=2) / GIB
    assert weights_gib == pytest.approx(logged_gib, rel=0.01)


def test_bnb_reads_quant_type_and_double_quant() -> None:
    quant = _quant(UNSLOTH_BNB | {"llm_int8_skip_modules": ["lm_head", "model.layers.0.mlp"]})
    assert quant.label == "bitsandbytes nf4 double-quant"


def test_fp8_names_its_block_and_vllm_method() -> None:
    assert _quant(QWEN3_FP8).label == "fp8 block 128x128"
    assert _quant(CT_FP8_DYNAMIC).method == "fp8"  # FP8 GEMMs either way
    assert _quant(CT_NVFP4).label == "compressed-tensors NVFP4"


@pytest.mark.parametrize(
    ("qc", "named"),
    [
        ({"quant_method": "hqq", "nbits": 4}, "quantization hqq"),
        ({"quant_method": "exl3", "bits": 3.5}, "quantization exl3"),
        ({"bits": 4}, "quantization (no quant_method)"),
        (
            _ct(
                {"num_bits": 2, "type": "int", "strategy": "group", "group_size": 64}, None, "pack"
            ),
            "compressed-tensors int2",
        ),
        (CT_W8A8 | {"sparsity_config": {"format": "sparse-24-bitmask"}}, "sparse-24-bitmask"),
        (AUTO_ROUND | {"data_type": "nv_fp"}, "auto-round with data_type nv_fp"),
    ],
)
def test_unknown_schemes_are_refused_by_name(qc: dict[str, Any], named: str) -> None:
    with pytest.raises(UnsupportedModelError, match=f"not modelled: .*{re.escape(named)}"):
        parse_quantization(qc, "test/model")


def test_unquantized_checkpoint_has_no_quant() -> None:
    assert parse_quantization(None, "m") is None
    assert parse_quantization({}, "m") is None
    # llm-compressor's FP8 KV-cache-only export: config_groups without a weight scheme
    kv_only = _ct({}, None, "dense") | {"kv_cache_scheme": {"num_bits": 8, "type": "float"}}
    kv_only["config_groups"]["group_0"].pop("weights")
    assert parse_quantization(kv_only, "m") is None
