"""vLLM's defaults per release and GPU (boundaries read from each release's source)."""

from __future__ import annotations

import pytest

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.errors import InvalidFlagError
from kvwise.planner import plan
from kvwise.planner.defaults import engine_rules, resolve_flags, rules_for

QWEN7 = "Qwen/Qwen2.5-7B-Instruct"


def _defaults(version: str, gpu: str) -> tuple[int, int]:
    rules = rules_for(version)
    resolved = resolve_flags(load_model(QWEN7), find_gpu(gpu), VllmFlags(), rules)
    return resolved.max_num_batched_tokens, resolved.max_num_seqs


@pytest.mark.parametrize(
    ("version", "gpu", "expected"),
    [
        ("0.8.1", "rtx3090", (2048, 1024)),  # 1024 sequences everywhere until the OOM reports
        ("0.8.1", "h100", (8192, 1024)),
        ("0.8.4", "rtx4090", (2048, 256)),
        ("0.8.5", "a100-80gb", (8192, 1024)),  # tier by memory, A100 included...
        ("0.9.0", "a100-80gb", (2048, 256)),  # ...then excluded
        ("0.19.0", "h100", (8192, 1024)),  # the logged "Defaulting max_num_seqs to 1024"
        ("0.28.0", "b200", (16384, 1024)),
        ("0.28.0", "h200", (8192, 1024)),  # 139.8 GiB is below the 160 GiB tier
        ("0.33.0", "rtx4090", (2048, 256)),
    ],
)
def test_batch_defaults_by_release_and_gpu(
    version: str, gpu: str, expected: tuple[int, int]
) -> None:
    assert _defaults(version, gpu) == expected


def test_v0_profiles_a_whole_prompt_unless_chunked_prefill_kicks_in_above_32k() -> None:
    rules = rules_for("0.6.4")
    model = load_model("meta-llama/Llama-3.1-8B-Instruct")
    at_20k = resolve_flags(model, find_gpu("3090"), VllmFlags(max_model_len=20000), rules)
    at_35k = resolve_flags(model, find_gpu("3090"), VllmFlags(max_model_len=35000), rules)
    assert (at_20k.enable_chunked_prefill, at_20k.max_num_batched_tokens) == (False, 20000)
    assert (at_35k.enable_chunked_prefill, at_35k.max_num_batched_tokens) == (True, 512)
    later = resolve_flags(
        model, find_gpu("3090"), VllmFlags(max_model_len=35000), rules_for("0.6.5")
    )
    assert later.max_num_batched_tokens == 2048


def test_utilization_default_and_graph_budget_change_in_0_20() -> None:
    assert rules_for("0.19.1").default_gpu_memory_utilization == 0.9
    assert not rules_for("0.19.1").cuda_graph_in_budget
    assert rules_for("0.20.0").default_gpu_memory_utilization == 0.92
    assert rules_for("0.20.0").cuda_graph_in_budget


def test_old_gpus_fall_back_to_v0_in_0_8_to_0_10_1() -> None:
    t4 = find_gpu("t4")
    assert engine_rules(rules_for("0.9.2"), t4, VllmFlags()).engine == "V0"
    assert engine_rules(rules_for("0.10.2"), t4, VllmFlags()).engine == "V1"
    assert engine_rules(rules_for("0.9.2"), find_gpu("a10"), VllmFlags()).engine == "V1"


def test_an_fp8_kv_cache_falls_back_to_v0_off_hopper_until_0_10_1() -> None:
    # vLLM 0.10.1.1 logs "--kv-cache-dtype is not supported by the V1 Engine. Falling back to V0."
    # on RTX 3080 Tis (batch f, deutsch-shorts); arg_utils.py:_is_v1_supported_oracle at 0.8.5-0.10.1
    fp8 = VllmFlags(kv_cache_dtype="fp8")
    engine = {
        (version, gpu): engine_rules(rules_for(version), find_gpu(gpu), fp8).engine
        for version in ("0.8.5", "0.9.2", "0.10.1.1", "0.10.2")
        for gpu in ("3080 ti", "a100-80gb", "h100-sxm", "b200")
    }
    assert engine[("0.10.1.1", "3080 ti")] == engine[("0.9.2", "a100-80gb")] == "V0"
    assert engine[("0.10.1.1", "h100-sxm")] == engine[("0.8.5", "h100-sxm")] == "V1"
    # compute capability 10.0 takes an fp8 KV cache on V1 from 0.10.0 only
    assert engine[("0.9.2", "b200")] == "V0"
    assert engine[("0.10.1.1", "b200")] == "V1"
    assert {engine[("0.10.2", gpu)] for gpu in ("3080 ti", "a100-80gb")} == {"V1"}
    # the auto KV dtype stays on V1 on the same cards
    assert engine_rules(rules_for("0.10.1.1"), find_gpu("3080 ti"), VllmFlags()).engine == "V1"


def test_flags_that_did_not_exist_yet_are_refused() -> None:
    with pytest.raises(InvalidFlagError, match=r"0\.10\.2"):
        plan(
            load_model(QWEN7),
            find_gpu("4090"),
            VllmFlags(kv_cache_memory_bytes=2**30),
            vllm_version="0.9.0",
        )
    with pytest.raises(InvalidFlagError, match=r"0\.14\.0"):
        plan(
            load_model(QWEN7), find_gpu("4090"), VllmFlags(max_model_len=-1), vllm_version="0.13.0"
        )


@pytest.mark.parametrize(
    ("version", "util", "fragment"),
    [
        ("0.8.1", 0.82, "with the models's max seq len (32768), ("),  # 0.7-0.21 carried the typo
        ("0.8.1", 0.82, "GB KV cache is needed"),
        ("0.19.0", 0.68, "Based on the available memory, the estimated maximum model length is"),
        ("0.19.0", 0.68, "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/"),
        ("0.33.0", 0.72, "(which also controls CPU memory on the CPU backend)"),
    ],
)
def test_max_model_len_error_wording_follows_the_release(
    version: str, util: float, fragment: str
) -> None:
    flags = VllmFlags(gpu_memory_utilization=util)
    result = plan(load_model(QWEN7), find_gpu("4090"), flags, vllm_version=version)
    assert result.error is not None and result.error.kind == "max_model_len_exceeds_kv_cache"
    assert fragment in result.error.message


def test_unknown_or_too_old_versions_are_usage_errors() -> None:
    with pytest.raises(InvalidFlagError):
        rules_for("banana")
    with pytest.raises(InvalidFlagError, match="predates"):
        rules_for("0.3.0")
