"""Checkpoints on disk for the resolution tests: real safetensors files and HF cache layouts.

A safetensors file is written as the format specifies (8-byte little-endian header length, the
JSON header, then the data); the data is left sparse (zeros that take no disk), since only the
header is ever read.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

# Qwen/Qwen2.5-7B-Instruct-AWQ config.json's quantization_config: AutoAWQ GEMM, 4 bits, group 128
QWEN_AWQ = {
    "bits": 4,
    "group_size": 128,
    "modules_to_not_convert": None,
    "quant_method": "awq",
    "version": "gemm",
    "zero_point": True,
}

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "U8": 1, "I8": 1, "F8_E4M3": 1}
Tensors = dict[str, tuple[str, tuple[int, ...]]]  # name -> (dtype, shape)


def tensor_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count * DTYPE_BYTES[dtype]


def write_safetensors(path: Path, tensors: Tensors) -> int:
    """Write a safetensors file; returns the bytes of its tensor data."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = tensor_bytes(dtype, shape)
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header).encode()
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.truncate(8 + len(raw) + offset)
    return offset


def catalog_config(model_id: str) -> dict[str, Any]:
    """A config.json shipped with kvwise's catalog (the published file, verbatim)."""
    from importlib import resources

    name = model_id.replace("/", "--") + ".json"
    raw = resources.files("kvwise.core").joinpath("data", "models", name).read_text()
    config: dict[str, Any] = json.loads(raw)["config"]
    return config


def hf_cache_snapshot(cache: Path, model_id: str, config: dict[str, Any], commit: str) -> Path:
    """`models--org--name/refs/main` + `snapshots/<commit>/config.json`, as huggingface_hub
    lays them out; returns the snapshot folder for the weight files."""
    org, name = model_id.split("/")
    repo = cache / f"models--{org}--{name}"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    (snapshot / "config.json").write_text(json.dumps(config))
    return snapshot


def _linears(cfg: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(in, out) of one decoder layer's linear layers, Llama/Qwen2 naming."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    head_dim = h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * head_dim
    return {
        "self_attn.q_proj": (h, h),
        "self_attn.k_proj": (h, kv),
        "self_attn.v_proj": (h, kv),
        "self_attn.o_proj": (h, h),
        "mlp.gate_proj": (h, inter),
        "mlp.up_proj": (h, inter),
        "mlp.down_proj": (inter, h),
    }


def _unquantized(cfg: dict[str, Any], dtype: str) -> Tensors:
    """Embedding, lm_head, norms and q/k/v biases: kept in the model dtype by every scheme."""
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    kv = cfg["num_key_value_heads"] * (h // cfg["num_attention_heads"])
    tensors: Tensors = {"model.embed_tokens.weight": (dtype, (vocab, h))}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = (dtype, (h,))
        tensors[p + "post_attention_layernorm.weight"] = (dtype, (h,))
        for proj, size in (("q_proj", h), ("k_proj", kv), ("v_proj", kv)):
            tensors[p + f"self_attn.{proj}.bias"] = (dtype, (size,))
    tensors["model.norm.weight"] = (dtype, (h,))
    tensors["lm_head.weight"] = (dtype, (vocab, h))
    return tensors


def awq_tensors(cfg: dict[str, Any], group: int = 128) -> Tensors:
    """An AutoAWQ GEMM checkpoint: qweight int32 [in, out/8], qzeros int32 [in/g, out/8],
    fp16 scales [in/g, out] (AutoAWQ's WQLinear_GEMM buffers)."""
    tensors = _unquantized(cfg, "F16")
    for i in range(cfg["num_hidden_layers"]):
        for name, (d_in, d_out) in _linears(cfg).items():
            p = f"model.layers.{i}.{name}."
            tensors[p + "qweight"] = ("I32", (d_in, d_out // 8))
            tensors[p + "qzeros"] = ("I32", (d_in // group, d_out // 8))
            tensors[p + "scales"] = ("F16", (d_in // group, d_out))
    return tensors


def bnb_nf4_tensors(cfg: dict[str, Any], skip: tuple[str, ...] = ()) -> Tensors:
    """A transformers-saved bitsandbytes nf4 checkpoint with double quantization: packed uint8
    weights [n/2, 1], uint8 absmax per 64 weights, fp32 nested absmax per 256 blocks, the
    256-entry nested code, the 16-entry nf4 code and the JSON quant-state blob. Modules whose
    name starts with an entry of `skip` stay bf16."""
    tensors = _unquantized(cfg, "BF16")
    for i in range(cfg["num_hidden_layers"]):
        for name, (d_in, d_out) in _linears(cfg).items():
            p = f"model.layers.{i}.{name}.weight"
            if any(f"model.layers.{i}.{name}".startswith(s) for s in skip):
                tensors[p] = ("BF16", (d_out, d_in))
                continue
            n = d_in * d_out
            tensors[p] = ("U8", (n // 2, 1))
            tensors[p + ".absmax"] = ("U8", (n // 64,))
            tensors[p + ".nested_absmax"] = ("F32", (-(-n // 64 // 256),))
            tensors[p + ".nested_quant_map"] = ("F32", (256,))
            tensors[p + ".quant_map"] = ("F32", (16,))
            tensors[p + ".quant_state.bitsandbytes__nf4"] = ("U8", (117,))
    return tensors
