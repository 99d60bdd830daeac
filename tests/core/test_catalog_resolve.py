"""Resolving a model a user has: a local folder, the Hugging Face cache, the catalog; and the
one clear line when it is nowhere. No network: the hub is off (HF_HUB_OFFLINE) or unreachable."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from kvwise.cli import main
from kvwise.core.catalog import load_model
from kvwise.core.gpus import GIB
from kvwise.errors import UnknownModelError
from tests.core.checkpoints import (
    QWEN_AWQ,
    awq_tensors,
    bnb_nf4_tensors,
    catalog_config,
    hf_cache_snapshot,
    tensor_bytes,
    write_safetensors,
)

BASE = "Qwen/Qwen2.5-7B-Instruct"
# quantization_config of unsloth's *-bnb-4bit uploads (e.g. unsloth/Qwen2.5-7B-Instruct-bnb-4bit
# config.json); the "dynamic" uploads list the modules they keep in bf16 in llm_int8_skip_modules
UNSLOTH_BNB = {
    "_load_in_4bit": True,
    "_load_in_8bit": False,
    "bnb_4bit_compute_dtype": "bfloat16",
    "bnb_4bit_quant_storage": "uint8",
    "bnb_4bit_quant_type": "nf4",
    "bnb_4bit_use_double_quant": True,
    "llm_int8_enable_fp32_cpu_offload": False,
    "llm_int8_has_fp16_weight": False,
    "llm_int8_threshold": 6.0,
    "load_in_4bit": True,
    "load_in_8bit": False,
    "quant_method": "bitsandbytes",
}


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def _plan_json(model: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["plan", model, "--gpu", "rtx4090", "--json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def _vllm_held_bnb_bytes(tensors: dict[str, tuple[str, tuple[int, ...]]]) -> int:
    """What vLLM's bitsandbytes loader keeps on the GPU, tensor by tensor: the double-quantized
    uint8 absmax becomes fp32 (dequantize_dq), the nested state is dropped, and the JSON
    quant-state blob stays on the CPU (bitsandbytes_loader.py, v0.11.0)."""
    total = 0
    for name, (dtype, shape) in tensors.items():
        if name.endswith((".nested_absmax", ".nested_quant_map", ".bitsandbytes__nf4")):
            continue
        size = tensor_bytes(dtype, shape)
        total += size * 4 if name.endswith(".absmax") else size
    return total


def test_unsloth_bnb_reupload_in_hf_cache_plans_with_its_checkpoint_size(
    hf_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = catalog_config(BASE)
    skip = ("model.layers.0.", "model.layers.1.", "model.layers.27.mlp")  # a "dynamic" upload
    qc = UNSLOTH_BNB | {"llm_int8_skip_modules": ["lm_head", *skip]}
    model_id = "unsloth/Qwen2.5-7B-Instruct-unsloth-bnb-4bit"
    snapshot = hf_cache_snapshot(hf_cache, model_id, base | {"quantization_config": qc}, "c0ffee")
    tensors = bnb_nf4_tensors(base, skip)
    write_safetensors(snapshot / "model.safetensors", tensors)

    plan = _plan_json(model_id, capsys)
    bf16 = _plan_json(BASE, capsys)

    held_gib = _vllm_held_bnb_bytes(tensors) / GIB
    rotary_gib = 32768 * 128 * 2 / GIB  # the cos/sin cache next to the weights
    assert plan["memory_gib"]["weights"] == pytest.approx(held_gib + rotary_gib, abs=0.002)
    assert plan["memory_gib"]["weights"] < 0.45 * bf16["memory_gib"]["weights"]
    assert plan["kv"]["tokens"] > bf16["kv"]["tokens"]  # the memory saved goes to the KV cache


def test_awq_reupload_with_only_its_index_in_the_cache_plans_with_total_size(
    hf_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # config.json and the index downloaded, no weights yet (`huggingface-cli download --include`)
    base = catalog_config(BASE)
    config = base | {"torch_dtype": "float16", "quantization_config": QWEN_AWQ}
    model_id = "someone/Qwen2.5-7B-Instruct-AWQ-reupload"
    snapshot = hf_cache_snapshot(hf_cache, model_id, config, "abc123")
    tensors = awq_tensors(base)
    weight_map = {name: "model-00001-of-00002.safetensors" for name in tensors}
    total = sum(tensor_bytes(dtype, shape) for dtype, shape in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (snapshot / "model.safetensors.index.json").write_text(json.dumps(index))

    plan = _plan_json(model_id, capsys)

    assert plan["flags"]["quantization"] == "awq"
    assert plan["memory_gib"]["weights"] == pytest.approx(total / GIB, abs=0.01)
    assert plan["memory_gib"]["weights"] < 0.4 * _plan_json(BASE, capsys)["memory_gib"]["weights"]


def test_hf_cache_snapshot_without_refs_main_is_found(hf_cache: Path) -> None:
    # downloaded at a pinned revision: no refs/main, one snapshot
    snapshot = hf_cache_snapshot(hf_cache, "acme/pinned-7b", catalog_config(BASE), "f00d")
    (snapshot.parents[1] / "refs" / "main").unlink()
    assert load_model("acme/pinned-7b").num_layers == 28


def test_hf_home_is_the_cache_root_when_hf_hub_cache_is_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hf_cache_snapshot(tmp_path / "hub", "acme/home-7b", catalog_config(BASE), "beef")
    assert load_model("acme/home-7b").hidden_size == 3584


def test_local_folder_plans_like_its_catalog_twin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "Qwen2.5-7B-Instruct"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(catalog_config(BASE)))

    local, twin = _plan_json(str(folder), capsys), _plan_json(BASE, capsys)

    assert local["kv"] == twin["kv"]
    assert local["memory_gib"] == twin["memory_gib"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens there once the socket is closed


@pytest.mark.parametrize("network", ["HF_HUB_OFFLINE=1", "hub unreachable"])
def test_unknown_model_is_one_line_and_exit_2(
    network: str,
    hf_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if network == "hub unreachable":
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")

    assert main(["plan", "some-org/nope", "--gpu", "rtx4090"]) == 2

    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("kvwise plan: error: unknown model 'some-org/nope'")
    assert ("HF_HUB_OFFLINE" in err) == (network == "HF_HUB_OFFLINE=1")
    assert ("not reachable" in err) == (network == "hub unreachable")


def test_hf_cache_lookup_ignores_case_as_the_hub_does(hf_cache: Path) -> None:
    hf_cache_snapshot(hf_cache, "Acme/Mixed-Case-7B", catalog_config(BASE), "cafe")
    assert load_model("acme/mixed-case-7b").num_layers == 28


@pytest.mark.parametrize("name", ["~nobody-such-user/model", "a" * 300])
def test_a_name_that_cannot_be_a_path_is_an_unknown_model_not_a_crash(name: str) -> None:
    with pytest.raises(UnknownModelError):
        load_model(name)


def test_an_exact_catalog_id_resolves_to_the_entry_the_whole_catalog_gives() -> None:
    """load_model reads `org/name`'s own catalog file instead of all of them: for every id the
    catalog lists, that file gives the same entry (fill-ins applied), or none where the whole
    catalog must decide (a derived variant, which the hub is asked for first)."""
    from kvwise.core import catalog

    entries = catalog._entries()
    assert len(entries) > 90  # the 75 verbatim copies and the derived variants
    for key, entry in entries.items():
        own_file = catalog._verbatim_copy(entry.model_id)
        assert own_file == (None if entry.is_derived else entry), key
        assert catalog._verbatim_copy(entry.model_id.upper()) is None  # other spellings: search
        if not entry.is_derived:
            assert load_model(entry.model_id) == entry.spec()
