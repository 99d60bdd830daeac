"""What is left on the device beside vLLM's budget once the KV pool is allocated, per release:
the room CUDA-graph capture and the sampler warm-up run in. Each test is constructed from the
arithmetic of vLLM's source at the release named (docs/vllm_rules.md names file and function)."""

from __future__ import annotations

from dataclasses import replace

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GIB, find_gpu
from kvwise.planner import Plan, plan

QWEN7 = "Qwen/Qwen2.5-7B-Instruct"


def _plan(model: str, gpu: str, version: str, **flags: object) -> Plan:
    return plan(load_model(model), find_gpu(gpu), VllmFlags(**flags), vllm_version=version)  # type: ignore[arg-type]


def test_global_accounting_keeps_the_cuda_context_inside_the_budget() -> None:
    # v0.8.5 v1/worker/gpu_worker.py:determine_available_memory: KV = total x util - (torch
    # peak + (total - free - torch allocated)). "total - free" holds the CUDA context, so the
    # device holds total x util once the pool is allocated, and graphs and the sampler warm-up
    # have total x (1 - util): at 0.982 on an 80 GB A100 that is 1.43 GiB, which holds
    # Qwen2.5-7B's 67 graphs and the warm-up of 256 requests (1.17 GiB). Charging the context
    # again beside the budget (0.5 GiB) would refuse it.
    flags = {"gpu_memory_utilization": 0.982, "max_num_seqs": 256, "max_model_len": 8192}
    early_v1 = _plan(QWEN7, "a100 sxm4 80gb", "0.8.5", **flags)
    assert early_v1.starts
    memory = early_v1.memory
    assert memory.peak_device_bytes == memory.budget_bytes + memory.cuda_graph_bytes
    assert (memory.total_bytes - memory.budget_bytes) / GIB > 1.4


def test_per_instance_accounting_keeps_the_context_beside_the_budget() -> None:
    # v0.9.1 v1/worker/gpu_worker.py: the budget is total x util of what this instance adds
    # after its snapshot, taken once its CUDA context exists: the context stays beside it, so
    # the same set-up at 0.9.1 has 0.5 GiB less room and its graphs no longer all fit.
    flags = {"gpu_memory_utilization": 0.982, "max_num_seqs": 256, "max_model_len": 8192}
    per_instance = _plan(QWEN7, "a100 sxm4 80gb", "0.9.1", **flags)
    assert per_instance.memory.peak_device_bytes > (
        per_instance.memory.budget_bytes + per_instance.memory.cuda_graph_bytes
    )
    assert not per_instance.starts


def _llama_on_l4(tp: int, **flags: object) -> Plan:
    base = {"tensor_parallel_size": tp, "max_model_len": 8192, **flags}
    return _plan("meta-llama/Llama-3.1-8B-Instruct", "l4", "0.6.5", **base)


def test_capture_verdict_at_tp4_on_pcie_is_not_modelled() -> None:
    # custom_all_reduce.py: off beyond two PCIe-only GPUs, so NCCL carries the all-reduces
    # captured in the graphs; 0.9 of an L4 leaves 1.7 GiB beside the budget
    nccl = _llama_on_l4(4, gpu_memory_utilization=0.9)
    assert not nccl.starts and nccl.error is None
    assert nccl.verdict_not_modelled is not None
    assert nccl.verdict_not_modelled.startswith("not modelled: CUDA-graph capture at TP 4")
    assert nccl.kv.tokens > 0  # the KV pool before capture is still planned
    assert nccl.to_json()["verdict_not_modelled"] == nccl.verdict_not_modelled


def test_capture_verdict_stands_where_nccl_is_not_in_the_graphs() -> None:
    assert _llama_on_l4(2, gpu_memory_utilization=0.9).starts  # two PCIe GPUs: custom all-reduce
    assert _llama_on_l4(4, gpu_memory_utilization=0.9, enforce_eager=True).starts  # no graphs


def test_room_beyond_v0s_graph_message_does_not_make_nccl_capture_a_start() -> None:
    # QwenLM/Qwen3#1387 (out-of-sample a-c): Qwen3-30B-A3B at TP 4 on four A10s at 0.7 had about
    # 6 GiB beside the budget, twice V0's "additional 1~3 GiB memory per GPU", and still died
    # after capture with 6.1 GiB held outside PyTorch: vLLM's message bounds nothing where NCCL
    # carries the captured all-reduces, so no start is promised there
    roomy = _plan("Qwen/Qwen3-30B-A3B", "a10", "0.19.0", tensor_parallel_size=4,
                  gpu_memory_utilization=0.7, max_model_len=8192)  # fmt: skip
    assert roomy.error is None and not roomy.starts
    assert roomy.verdict_not_modelled is not None
    assert "TP 4 without the custom all-reduce" in roomy.verdict_not_modelled
    room = roomy.memory.total_bytes - roomy.memory.budget_bytes - roomy.memory.cuda_graph_bytes
    assert room > 3 * GIB
    assert _llama_on_l4(4, gpu_memory_utilization=0.8).verdict_not_modelled is not None


def test_two_geforce_cards_without_p2p_keep_a_verdict() -> None:
    # two RTX 4090s (no P2P: NCCL carries the captured all-reduces) at vLLM's default 0.92 leave
    # under 2 GiB beside the budget; such pairs start in public logs (the in-sample vllm#28228:
    # 2x RTX 3090 at 0.95), so the plan answers "starts", not "not modelled"
    pair = _plan("Qwen/Qwen2.5-7B-Instruct", "rtx4090", "0.33.0", tensor_parallel_size=2)
    assert pair.verdict_not_modelled is None
    assert pair.starts


def test_a_tight_card_names_the_flag_that_says_what_else_holds_it() -> None:
    # a 4 GB laptop card under Windows/WSL2 (batch f, rtx3050-awq): the desktop holds part of the
    # card that vLLM's budget does not see; the warning says how to tell kvwise
    flags = {"gpu_memory_utilization": 0.78, "max_model_len": 4096, "max_num_seqs": 8}
    flags |= {"max_num_batched_tokens": 2048, "quantization": "awq_marlin", "dtype": "float16"}
    model, gpu = load_model("Qwen/Qwen2.5-3B-Instruct-AWQ"), find_gpu("rtx3050-laptop")
    tight = plan(model, gpu, VllmFlags(**flags), vllm_version="0.11.0")  # type: ignore[arg-type]
    assert tight.starts
    assert any("--gpu-free-gib" in w for w in tight.warnings)
    # once the user gives the free memory (here: nothing else on the card), no hint is added
    idle = replace(gpu, free_bytes=gpu.memory_bytes)
    told = plan(model, idle, VllmFlags(**flags), vllm_version="0.11.0")  # type: ignore[arg-type]
    assert told.starts
    assert not any("--gpu-free-gib" in w for w in told.warnings)
