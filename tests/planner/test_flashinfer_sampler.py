"""The V1 runner's profile sampler with FlashInfer (0.10.2+) and the fused-MoE caches before the
WorkspaceManager (< 0.13): what GPUStack's H100 runs of vLLM 0.10.2 / 0.11.0 show."""

from __future__ import annotations

import json

import pytest

from kvwise.cli import main
from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.planner import plan
from kvwise.planner.defaults import engine_rules, resolve_flags, rules_for
from kvwise.planner.memory import v1_sampler_bytes_per_logit


def test_gpt_oss_120b_starts_on_one_h100_at_0_10_2_with_room_for_a_32k_prompt() -> None:
    # gpustack/gpustack docs/performance-lab/gpt-oss-120b/h100.md (vLLM 0.10.2, one H100 SXM):
    # `vllm serve openai/gpt-oss-120b --max-model-len 32768` served 100 prompts of 32,000 tokens
    # (+100 output), so vLLM started and its KV pool held one such request
    result = plan(
        load_model("openai/gpt-oss-120b"),
        find_gpu("h100 sxm"),
        VllmFlags(max_model_len=32768),
        vllm_version="0.10.2",
    )
    assert result.starts
    assert result.kv.tokens >= 32_100


def test_the_flashinfer_sampler_takes_less_of_the_budget_than_the_pytorch_sort() -> None:
    # 0.10.1 is planned with the PyTorch sort (a Marlin-only install, vllm#23278), 0.10.2 with
    # FlashInfer's top-k/top-p: same model, card and flags, a smaller profile peak
    model, gpu = load_model("Qwen/Qwen3-32B"), find_gpu("h100 sxm")
    flags = VllmFlags(max_model_len=8192)
    sort = plan(model, gpu, flags, vllm_version="0.10.1")
    flashinfer = plan(model, gpu, flags, vllm_version="0.10.2")
    assert flashinfer.memory.activation_peak_bytes < sort.memory.activation_peak_bytes
    assert flashinfer.kv.tokens > sort.kv.tokens


def test_a_card_without_the_flashinfer_sampler_keeps_the_sort() -> None:
    # flashinfer_sampler_supported: compute capability 7.5-12.1; a V100 (7.0) at 0.11.0 sorts the
    # vocabulary as every card did at 0.10.1, an H100 does not
    model = load_model("Qwen/Qwen2.5-7B-Instruct")
    flags = VllmFlags(max_model_len=4096, dtype="float16")

    def per_logit(gpu_name: str, version: str) -> float:
        gpu = find_gpu(gpu_name)
        rules = engine_rules(rules_for(version), gpu, flags)
        return v1_sampler_bytes_per_logit(gpu, resolve_flags(model, gpu, flags, rules), rules)

    assert per_logit("v100-32gb-sxm2", "0.11.0") == per_logit("h100 sxm", "0.10.1")
    assert per_logit("h100 sxm", "0.11.0") < per_logit("v100-32gb-sxm2", "0.11.0")


def test_from_0_11_1_the_profile_sorts_unless_flashinfer_is_asked_for() -> None:
    # v0.11.1-v0.16.0 vllm/v1/sample/ops/topk_topp_sampler.py:TopKTopPSampler.__init__ takes
    # FlashInfer only with VLLM_USE_FLASHINFER_SAMPLER=1 (0.11.0: whenever it imports), so the
    # same H100 start keeps less KV at 0.11.1 than at 0.11.0, and 0.16.0 as much as 0.11.1
    model, gpu = load_model("meta-llama/Llama-3.1-8B-Instruct"), find_gpu("h100 sxm")
    flags = VllmFlags(max_model_len=8192)
    by_version = {
        v: plan(model, gpu, flags, vllm_version=v) for v in ("0.11.0", "0.11.1", "0.16.0")
    }
    assert by_version["0.11.1"].memory.activation_peak_bytes > (
        by_version["0.11.0"].memory.activation_peak_bytes
    )
    assert by_version["0.11.1"].kv.tokens < by_version["0.11.0"].kv.tokens
    assert by_version["0.16.0"].memory.activation_peak_bytes == (
        by_version["0.11.1"].memory.activation_peak_bytes
    )


def test_llama3_8b_on_an_h200_at_0_11_2_gets_the_logged_kv_pool() -> None:
    # faradawn/bench3 @446e08c, logs/vllm_server.log: vLLM 0.11.2, one H200, `--dtype bfloat16
    # --max-model-len 1024` (0.9, 1,024 sequences, 8,192 batched tokens): "GPU KV cache size:
    # 868,080 tokens"; with 0.11.0's FlashInfer sampler the plan had 888,976 (+2.4 %)
    result = plan(
        load_model("meta-llama/Meta-Llama-3-8B-Instruct"),
        find_gpu("NVIDIA H200"),
        VllmFlags(max_model_len=1024, dtype="bfloat16"),
        vllm_version="0.11.2",
    )
    assert result.starts
    assert abs(result.kv.tokens - 868_080) / 868_080 < 0.015


def test_a_user_who_turns_the_flashinfer_sampler_on_gets_its_smaller_profile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 0.11.1+: `VLLM_USE_FLASHINFER_SAMPLER=1` makes TopKTopPSampler take FlashInfer
    # (dtype + 12 bytes per logit instead of the sort), so `--flashinfer-sampler 1` leaves
    # more of the budget to the KV cache than the release's default
    base = ["plan", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100 sxm"]
    base += ["--vllm-version", "0.14.0", "--max-model-len", "8192", "--json"]

    def kv_tokens(*extra: str) -> int:
        assert main([*base, *extra]) == 0
        return int(json.loads(capsys.readouterr().out)["kv"]["tokens"])

    assert kv_tokens("--flashinfer-sampler", "1") > kv_tokens()
    assert kv_tokens("--flashinfer-sampler", "0") == kv_tokens()


def test_a_pip_install_without_flashinfer_sorts_at_0_11_0() -> None:
    # 0.11.0 samples with FlashInfer whenever it imports; the wheel lists flashinfer-python as an
    # extra, so a plain `pip install vllm==0.11.0` sorts as 0.10.1 does
    model, gpu = load_model("Qwen/Qwen2.5-7B-Instruct"), find_gpu("NVIDIA L4")
    flags = VllmFlags(max_model_len=8192)
    pip = plan(model, gpu, flags, vllm_version="0.11.0", flashinfer_sampler=False)
    image = plan(model, gpu, flags, vllm_version="0.11.0")
    assert pip.kv.tokens < image.kv.tokens
    assert pip.memory.activation_peak_bytes == (
        plan(model, gpu, flags, vllm_version="0.10.1").memory.activation_peak_bytes
    )
