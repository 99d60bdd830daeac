"""The fused-MoE layer's share of vLLM's profile-run peak (planner/moe_memory.py)."""

from __future__ import annotations

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GIB, find_gpu
from kvwise.planner import plan
from kvwise.planner.defaults import engine_rules, resolve_flags, rules_for
from kvwise.planner.moe_memory import moe_profile_bytes

GPT_OSS = "openai/gpt-oss-20b"
FLAGS = VllmFlags(max_model_len=8192, max_num_seqs=1024, max_num_batched_tokens=8192)


def _moe(model: str, gpu_name: str, version: str):  # type: ignore[no-untyped-def]
    spec, gpu = load_model(model), find_gpu(gpu_name)
    rules = engine_rules(rules_for(version), gpu, FLAGS)
    return moe_profile_bytes(spec, gpu, resolve_flags(spec, gpu, FLAGS, rules), rules)


def test_gpt_oss_on_hopper_keeps_only_the_workspace_managers_buffer_under_the_sampler() -> None:
    # OAITritonExperts.workspace_shapes (0.19): workspace2 [8192 x 4 routed rows, 2880] and the
    # output [8192, 2880] in bf16 stay in the WorkspaceManager; matmul_ogs's gate_up output
    # [32768, 2 x 2880] is freed when the call returns
    moe = _moe(GPT_OSS, "h100 sxm", "0.19.0")
    assert moe.persistent == (32768 * 2880 + 8192 * 2880) * 2
    assert moe.transient == 32768 * 5760 * 2


def test_gpt_oss_profile_peak_is_within_a_quarter_gib_of_the_0_19_h100_log() -> None:
    # llm-d-planner PR #205 sweep, gpt-oss-20b, H100, 0.19.0: "torch peak memory increase:
    # 2.87GiB", "Available KV cache memory: 58.47 GiB"; charging every MoE buffer on top of
    # the sampler gave 3.55 and 57.74
    result = plan(
        load_model(GPT_OSS),
        find_gpu("h100 sxm"),
        VllmFlags(max_model_len=8192, max_num_seqs=1024, gpu_memory_utilization=0.95),
        vllm_version="0.19.0",
    )
    assert abs(result.memory.activation_peak_bytes / GIB - 2.87) < 0.25
    assert abs(result.memory.kv_cache_bytes / GIB - 58.47) < 0.25


def test_off_hopper_every_moe_buffer_adds_up() -> None:
    # A100 runs MXFP4 through Marlin at 0.19: the fitted all-on-top charge
    moe = _moe(GPT_OSS, "a100 80gb", "0.19.0")
    assert moe.transient == 0.0
    assert moe.persistent == 32768 * (3 * 2880 + 2880) * 2


def test_before_the_workspace_manager_the_moe_buffers_are_freed_before_the_sampler() -> None:
    # 0.10.2-0.12 have no WorkspaceManager: fused_marlin_moe allocates its intermediate caches
    # inside the call (torch.empty, read at 0.10.2 and 0.11.0), so nothing stays for the sampler
    for version in ("0.10.2", "0.12.0"):
        moe = _moe(GPT_OSS, "h100 sxm", version)
        assert moe.persistent == 0.0
        assert moe.transient == 32768 * (3 * 2880 + 2880) * 2
