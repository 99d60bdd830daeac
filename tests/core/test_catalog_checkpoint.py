"""A checkpoint's weight bytes from safetensors metadata: what vLLM loads and what it skips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvwise.core.models import ModelSpec, spec_from_config
from kvwise.core.safetensors_meta import index_bytes, local_checkpoint_bytes, read_file_header
from kvwise.errors import DataError
from tests.core.checkpoints import catalog_config, write_safetensors

BASE = "Qwen/Qwen2.5-7B-Instruct"  # 28 layers


def _spec(extra: dict[str, object] | None = None) -> ModelSpec:
    return spec_from_config(catalog_config(BASE) | (extra or {}), "test/model")


def test_header_gives_dtype_elements_and_bytes(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "a.safetensors", {"w": ("BF16", (3, 5)), "s": ("F32", (7,))})
    tensors = read_file_header(tmp_path / "a.safetensors")
    assert (tensors["w"].dtype, tensors["w"].num_elements, tensors["w"].num_bytes) == (
        "BF16",
        15,
        30,
    )
    assert tensors["s"].num_bytes == 28


def test_mtp_layers_past_num_hidden_layers_are_not_counted(tmp_path: Path) -> None:
    # DeepSeek-V3 style: the MTP head is stored as one more decoder layer, which vLLM skips
    write_safetensors(
        tmp_path / "model.safetensors",
        {
            "model.layers.27.mlp.down_proj.weight": ("BF16", (10, 10)),
            "model.layers.28.mlp.down_proj.weight": ("BF16", (1000, 1000)),
            "model.mtp.0.proj.weight": ("BF16", (1000, 1000)),
        },
    )
    assert local_checkpoint_bytes(tmp_path, _spec()) == 200


AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128}


def test_index_total_is_refused_when_it_holds_tensors_vllm_skips() -> None:
    weight_map = {"model.layers.0.mlp.up_proj.qweight": "a", "model.layers.28.eh_proj.weight": "a"}
    index = {"metadata": {"total_size": 123}, "weight_map": weight_map}
    assert index_bytes(index, _spec({"quantization_config": AWQ})) is None
    del weight_map["model.layers.28.eh_proj.weight"]
    assert index_bytes(index, _spec({"quantization_config": AWQ})) == 123


def test_index_total_of_an_unquantized_checkpoint_is_not_used() -> None:
    # fp32 files under a bfloat16 config would double it; the parameter count is exact here
    index = {"metadata": {"total_size": 123}, "weight_map": {"model.norm.weight": "a"}}
    assert index_bytes(index, _spec()) is None


def test_fp32_files_count_at_the_model_dtype(tmp_path: Path) -> None:
    # vLLM's default loader copies each tensor into a bf16 parameter: 4 bytes on disk, 2 held
    write_safetensors(tmp_path / "model.safetensors", {"model.norm.weight": ("F32", (8,))})
    assert local_checkpoint_bytes(tmp_path, _spec()) == 16


def test_shards_present_beat_the_index_total(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "s1.safetensors", {"model.norm.weight": ("BF16", (8,))})
    index = {"metadata": {"total_size": 999}, "weight_map": {"model.norm.weight": "s1.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert local_checkpoint_bytes(tmp_path, _spec()) == 16


def test_mxfp4_checkpoints_give_no_size(tmp_path: Path) -> None:
    # vLLM pads MXFP4 experts to its MoE kernel's alignment: the file is not what the GPU holds
    write_safetensors(tmp_path / "model.safetensors", {"model.norm.weight": ("BF16", (8,))})
    qc = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}
    assert local_checkpoint_bytes(tmp_path, _spec({"quantization_config": qc})) is None


def test_a_folder_without_safetensors_gives_no_size(tmp_path: Path) -> None:
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0" * 16)
    assert local_checkpoint_bytes(tmp_path, _spec()) is None


def test_a_damaged_header_is_a_data_error(tmp_path: Path) -> None:
    (tmp_path / "bad.safetensors").write_bytes((10**12).to_bytes(8, "little") + b"{")
    with pytest.raises(DataError, match="not a safetensors file"):
        read_file_header(tmp_path / "bad.safetensors")
    (tmp_path / "model.safetensors").write_bytes((1).to_bytes(8, "little") + b"{")
    assert local_checkpoint_bytes(tmp_path, _spec()) is None


def test_tied_lm_head_copy_and_inv_freq_buffers_are_not_loaded(tmp_path: Path) -> None:
    tied = {"tie_word_embeddings": True}
    write_safetensors(
        tmp_path / "model.safetensors",
        {
            "model.embed_tokens.weight": ("BF16", (10, 4)),
            "lm_head.weight": ("BF16", (10, 4)),
            "model.layers.0.self_attn.rotary_emb.inv_freq": ("F32", (64,)),
        },
    )
    assert local_checkpoint_bytes(tmp_path, _spec(tied)) == 80
    assert local_checkpoint_bytes(tmp_path, _spec()) == 160  # untied: both matrices are held
