"""SGLang's start-up room outside the static pool: where the verdict flips to SGLang's
"Capture cuda graph failed", how --cuda-graph-max-bs, --chunked-prefill-size and
--context-length move that boundary, and the fix kvwise prescribes.

The expected figures are recomputed here from SGLang's source, not from kvwise's code:
model_runner.py init_memory_pool allocates ReqToTokenPool(size=max_num_reqs + 1,
max_context_len=context_len + 4) of int32 after the pool (0.4.3), max_num_reqs =
min(max(int(tokens / context_len x 512), 2048), 4096); server_args.py _handle_gpu_memory_settings
(0.5.3) estimates 512 MiB for the attention backend and 2 MiB per cuda_graph_max_bs; 0.5.10+
captures piecewise graphs at every token count up to chunked_prefill_size, 8 MiB each. For a
multimodal model model_runner.py model_specific_adjustment multiplies the fraction in use, a
given one too, by 0.95 (0.4.0-0.4.4.post3); hf_transformers_utils.get_context_length derives the
context as max_position_embeddings x the rope_scaling factor (Gemma 3: 8 x 131,072).
"""

from __future__ import annotations

from collections.abc import Callable

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import resolve_gpu
from kvwise.planner.memory import CUDA_CONTEXT_BYTES
from kvwise.planner.sglang import SglangFlags, SglangPlan, plan_sglang

MIB = 2**20
Planner = Callable[[float], SglangPlan]


def _planner(model: str, gpu: str, version: str, context: int, **sglang: int) -> Planner:
    spec, card = load_model(model), resolve_gpu(gpu, None, None)
    flags = VllmFlags(max_model_len=context)

    def plan(fraction: float) -> SglangPlan:
        return plan_sglang(
            spec, card, flags, SglangFlags(version=version, mem_fraction_static=fraction, **sglang)
        )

    return plan


def _boundary(plan: Planner) -> float:
    """The largest fraction that starts (to 1e-5), searched between one that starts and 0.9999."""
    low, high = 0.5, 0.9999
    assert plan(low).starts and not plan(high).starts
    while high - low > 1e-5:
        mid = (low + high) / 2
        low, high = (mid, high) if plan(mid).starts else (low, mid)
    return low


def test_gemma3_on_a_4090_fails_graph_capture_where_the_request_table_and_graphs_no_longer_fit() -> (
    None
):
    # the stated setup of the public sweep sgl-project/sglang#4840 (Gemma-3-4B-it, its 0.4.4-era
    # release, full 131,072-token context), on an RTX 4090: the thread names no card, so the
    # sweep itself (OOM above 0.65) cannot be scored; this pins the boundary the source implies
    plan = _planner("google/gemma-3-4b-it", "rtx4090", "0.4.4", 131072)
    free = plan(0.8).pre_load_free_bytes
    table = (2048 + 1) * (131072 + 4) * 4  # the pool is far below 2048 x 131072 / 512 tokens
    need = table + 512 * MIB + 8 * 2 * MIB  # graphs up to batch 8 on cards under 25,000 MiB
    expected = (1 - need / free) / 0.95  # the flag's value: SGLang uses 0.95 x it (multimodal)
    below, above = plan(expected - 0.002), plan(expected + 0.002)
    assert below.starts and below.max_total_num_tokens > 0
    assert not above.starts and above.max_total_num_tokens > below.max_total_num_tokens
    error = above.error or ""
    assert error.startswith("Exception: Capture cuda graph failed: CUDA out of memory")
    assert "set --cuda-graph-max-bs to a smaller value (e.g., 32)" in error  # 0.4.3's own words
    # the pool itself is not the problem: a larger fraction is not what SGLang's message asks
    assert "Not enough memory" not in error


def test_a_smaller_cuda_graph_max_bs_raises_the_boundary_by_two_mib_per_batch_size() -> None:
    at_256 = _planner("meta-llama/Llama-3.1-8B-Instruct", "h100", "0.5.5", 8192)
    at_64 = _planner(
        "meta-llama/Llama-3.1-8B-Instruct", "h100", "0.5.5", 8192, cuda_graph_max_bs=64
    )
    free = at_256(0.9).pre_load_free_bytes
    assert at_256(0.9).cuda_graph_max_bs == 256  # H100 default at TP 1 (0.5.3+)
    shift = _boundary(at_64) - _boundary(at_256)
    assert abs(shift - (256 - 64) * 2 * MIB / free) < 3e-5


def test_a_smaller_chunk_moves_the_start_boundary_only_where_piecewise_graphs_are_captured() -> (
    None
):
    def shift(version: str) -> float:
        big = _planner("meta-llama/Llama-3.1-8B-Instruct", "h100", version, 8192)
        small = _planner(
            "meta-llama/Llama-3.1-8B-Instruct", "h100", version, 8192, chunked_prefill_size=2048
        )
        return _boundary(small) - _boundary(big)

    free = _planner("meta-llama/Llama-3.1-8B-Instruct", "h100", "0.5.12", 8192)(0.9)
    # _generate_piecewise_cuda_graph_tokens (0.5.10): 4-32 step 4, 48-256 step 16, 288-512 step 32,
    # 576-1024 step 64, 1280-4096 step 256, then every 512: 58 counts up to 8192, 42 up to 2048
    expected = (58 - 42) * 8 * MIB / free.pre_load_free_bytes
    assert abs(shift("0.5.12") - expected) < 3e-5
    # before 0.5.10 the chunk is first run by a user's long prompt, after start-up (the warm-up
    # request is one short sentence): it does not move the start verdict
    assert abs(shift("0.5.5")) < 3e-5


def test_each_prescribed_fix_starts_and_keeps_a_kv_pool() -> None:
    plan = _planner("google/gemma-3-4b-it", "rtx4090", "0.4.4", 131072)
    failing = plan(0.99)
    assert not failing.starts and failing.fix is not None
    fix = failing.fix
    assert fix.mem_fraction_static is not None and fix.context_length is not None
    lower = plan(fix.mem_fraction_static)
    assert lower.starts and lower.max_total_num_tokens > 0
    assert not plan(fix.mem_fraction_static + 0.01).starts  # the largest such fraction
    shorter = _planner("google/gemma-3-4b-it", "rtx4090", "0.4.4", fix.context_length)(0.99)
    assert shorter.starts
    assert f"--mem-fraction-static {fix.mem_fraction_static:.2f}" in (failing.error or "")

    # graphs dominate on an H100 with a short context: fewer captured batch sizes is a fix too
    h100 = _planner("meta-llama/Llama-3.1-8B-Instruct", "h100", "0.5.5", 8192)
    greedy = h100(_boundary(h100) + 0.001)
    assert greedy.fix is not None and greedy.fix.cuda_graph_max_bs is not None
    assert greedy.fix.cuda_graph_max_bs < 256
    smaller = _planner(
        "meta-llama/Llama-3.1-8B-Instruct",
        "h100",
        "0.5.5",
        8192,
        cuda_graph_max_bs=greedy.fix.cuda_graph_max_bs,
    )
    assert smaller(greedy.mem_fraction_static).starts


def test_releases_without_cuda_graphs_only_need_the_request_table_and_attention_buffers() -> None:
    plan = _planner("meta-llama/Llama-3.1-8B-Instruct", "a10g", "0.1.17", 8192)
    result = plan(0.9)
    assert result.outside is not None and result.outside.graphs == 0
    greedy = plan(0.999)
    assert not greedy.starts
    assert greedy.fix is not None and greedy.fix.cuda_graph_max_bs is None
    assert (greedy.error or "").startswith("torch.cuda.OutOfMemoryError: CUDA out of memory")


# sgl-project/sglang#4840 (vhain, 2025-03-28): `test_vision_openai_server.py TestGemma3itServer`
# (google/gemma-3-4b-it, no --context-length, only --mem-fraction-static varied) on Windows,
# which "was taking around 1GB of VRAM"; OOM at 0.70, 0.67, 0.66, none at 0.65, 0.62, 0.60,
# 0.55. At 0.65 SGLang logged "KV Cache is allocated. #tokens: 46045", "Memory pool end. avail
# mem=0.07 GB" and captured 4 graph batch sizes. No card is named and no "Load weight" line is
# quoted, so the card is read from what was logged: 4 batch sizes are cuda_graph_max_bs 8, which
# server_args.py (0.4.4.post2) picks only when nvidia-smi's total is under 25,000 MiB, and the
# pool formula with 0.65 x 0.95 (model_runner.py, multimodal) puts the free memory before loading
# at about 22.7 GiB: a 24 GB card (the RTX 4090 and 3090 differ by 0.03 GiB here).
SWEEP_4840 = {0.70: False, 0.67: False, 0.66: False, 0.65: True, 0.62: True, 0.60: True, 0.55: True}
LOGGED_TOKENS_4840 = 46045


def _gemma3_4840(free_gib: float | None) -> Planner:
    spec, card = load_model("google/gemma-3-4b-it"), resolve_gpu("rtx4090", None, free_gib)

    def plan(fraction: float) -> SglangPlan:
        return plan_sglang(spec, card, VllmFlags(), SglangFlags("0.4.4", fraction))

    return plan


def test_the_4840_sweep_boundary_is_the_request_table_of_gemma3s_derived_million_token_context() -> (
    None
):
    card = _gemma3_4840(None)(0.65)
    assert card.cuda_graph_max_bs == 8  # the 4 captured batch sizes (1, 2, 4, 8) of the log
    assert card.context_length == 8 * 131072  # get_context_length: rope factor 8 x 131,072
    # the free memory the logged pool implies: pool = 0.65 x 0.95 x free - weights
    cell = 4 * 256 * 34 * 2 * 2  # KV heads x head_dim x layers x (K, V) x bf16
    free = (LOGGED_TOKENS_4840 * cell + card.weights_bytes) / (0.65 * 0.95)
    plan = _gemma3_4840((free + CUDA_CONTEXT_BYTES) / 2**30)
    table = (2048 + 1) * (8 * 131072 + 4) * 4  # 8.0 GiB: ReqToTokenPool after the pool
    for fraction, starts in SWEEP_4840.items():
        result = plan(fraction)
        assert result.starts == starts, fraction
        assert result.outside is not None and result.outside.req_to_token == table
        if not starts:
            error = result.error or ""
            assert error.startswith("Exception: Capture cuda graph failed: CUDA out of memory")
            assert "request table 8.00" in error


def test_the_4840_boundary_stays_within_a_sweep_step_whatever_windows_took() -> None:
    # taken literally, "around 1GB": from nothing to 1 GiB taken before SGLang starts, the
    # boundary SGLang's terms put stays between 0.64 and 0.67 and the pool at 0.65 within 8 %
    memory = resolve_gpu("rtx4090", None, None).memory_gib
    for taken in (0.0, 0.5, 1.0):
        plan = _gemma3_4840(memory - taken)
        low, high = 0.5, 0.9
        while high - low > 1e-4:
            mid = (low + high) / 2
            low, high = (mid, high) if plan(mid).starts else (low, mid)
        assert 0.64 <= low < 0.67, (taken, low)
        pool = plan(0.65).max_total_num_tokens
        assert abs(pool - LOGGED_TOKENS_4840) / LOGGED_TOKENS_4840 < 0.08, (taken, pool)
