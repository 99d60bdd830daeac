"""vLLM V0's scheduler where it differs from V1: its block manager's admission (whole sequence
above a watermark, 0.9.1 `core/block_manager.py: SelfAttnBlockSpaceManager.can_allocate`) and
multi-step blocks (0.6.0 `engine/llm_engine.py: LLMEngine.step`).

Expected values are worked out by hand from those rules (block size 4, free queue 1, 2, 3...).
"""

from __future__ import annotations

from dataclasses import replace

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.sim import deploy
from kvwise.sim.request import Request
from kvwise.sim.runner import simulate
from kvwise.sim.workloads import WorkloadSpec
from tests.sim.factories import ids, request, scheduled, scheduler, step


def test_v0_takes_the_whole_prompts_blocks_at_admission_while_computing_a_chunk() -> None:
    v0 = scheduler(21, max_num_batched_tokens=16, reserve_full_isl=False, v0_watermark_blocks=0)
    v1 = scheduler(21, max_num_batched_tokens=16, reserve_full_isl=False)
    for s in (v0, v1):
        s.add_request(request(1, 40))
        plan, _, _ = step(s)
        assert scheduled(plan) == [(1, 16)]  # a 16-token chunk either way
    assert v0.running[1].block_ids == list(range(1, 11))  # 40 tokens: 10 blocks, all now
    assert v1.running[1].block_ids == [1, 2, 3, 4]  # V1 (before 0.18): the chunk's blocks


def test_v0_keeps_the_watermark_free_and_ignores_a_prompt_that_could_never_fit() -> None:
    ignored: list[Request] = []
    s = scheduler(13, max_num_batched_tokens=64, v0_watermark_blocks=2)  # 12 usable blocks
    s.on_ignored = ignored.append
    too_big, first, second = request(1, 44), request(2, 40), request(3, 4)
    for r in (too_big, first, second):
        s.add_request(r)
    plan, _, _ = step(s)
    # 44 tokens = 11 blocks: 12 - 11 < 2 (AllocStatus.NEVER), dropped; 40 tokens = 10 blocks
    # leave exactly the watermark; the 1-block prompt would eat into it (LATER): it waits
    assert ids(ignored) == [1]
    assert scheduled(plan) == [(2, 40)]
    assert ids(s.waiting) == [3]
    assert s.kv_cache.pool.num_free_blocks == 2
    v1 = scheduler(13, max_num_batched_tokens=64)
    for r in (request(2, 40), request(3, 4)):
        v1.add_request(r)
    plan, _, _ = step(v1)
    assert scheduled(plan) == [(2, 40), (3, 4)]  # V1 fills the pool to the last block


def test_v0_multi_step_runs_the_blocks_remaining_steps_after_its_batch_finished() -> None:
    s = scheduler(32, is_v0=True, num_scheduler_steps=4, max_num_batched_tokens=64)
    s.add_request(request(1, 4, output_len=2))
    plan, produced, _ = step(s)
    assert scheduled(plan) == [(1, 4)] and ids(produced) == [1]  # prefill: first token
    s.add_request(request(2, 4, output_len=3))  # arrives during r1's prefill
    plan, _, finished = step(s)
    assert scheduled(plan) == [(2, 4)]  # V0 prefill-first: the queue is seen before decoding
    plan, _, finished = step(s)  # a 4-step decode block starts with r1 and r2
    assert scheduled(plan) == [(1, 1), (2, 1)]
    assert ids(finished) == [1]  # r1's second token: done in the block's first step
    s.add_request(request(3, 4, output_len=2))
    plan, _, finished = step(s)
    assert ids(finished) == [2]
    # the block's two last steps still compute both finished sequences (no new token is
    # reported), and r3 waits for the block's end
    for _ in range(2):
        plan, produced, _ = step(s)
        assert (plan.num_scheduled_reqs, plan.num_decode_tokens, produced) == (2, 2, [])
        assert not s.running and ids(s.waiting) == [3]
    plan, _, _ = step(s)
    assert scheduled(plan) == [(3, 4)]  # the next block boundary


def test_v0_multi_step_serves_a_queue_behind_a_batch_that_finishes_inside_a_block() -> None:
    """vLLM 0.6.0 with --num-scheduler-steps 8 and 4 sequences at a time: every batch of equal
    outputs ends in the middle of a block while more requests wait (it used to stall)."""
    dep = deploy.deployment(
        load_model("mistralai/Mistral-7B-v0.3"),
        find_gpu("a100-pcie-40gb"),
        VllmFlags(max_num_seqs=4),
        vllm_version="0.6.0",
        num_scheduler_steps=8,
    )
    spec = WorkloadSpec("random", num_prompts=20, input_len=128, output_len=13)
    metrics = simulate(dep.config, spec, 0).metrics
    assert metrics["completed"] == 20
    # batches of 4: a prefill step, then 12 decode steps rounded up to 2 blocks of 8; after
    # the last batch nothing waits, and the run ends with its last token
    assert metrics["num_steps"] == 4 * (1 + 16) + (1 + 12)


def test_v0_long_prompts_offline_preempt_far_less_than_with_v1_admission() -> None:
    """livinfly's offline in4096 runs (0.9.1, VLLM_USE_V1=0): V0 admits a prompt only when its
    whole sequence fits above the watermark, so it does not refill the pool to the last block
    and preempt the newcomers again at every block boundary."""
    dep = deploy.deployment(
        load_model("Qwen/Qwen3-8B"),
        find_gpu("a100-pcie-40gb"),
        VllmFlags(),
        vllm_version="0.9.1",
        vllm_use_v1=False,
        num_gpu_blocks=4000,
    )
    assert dep.config.engine.enable_chunked_prefill  # V0 above 32K context: chunks as V1
    spec = WorkloadSpec("random", num_prompts=60, input_len=4096, output_len=1024)
    v0 = simulate(dep.config, spec, 0).metrics
    v1_rules = replace(dep.config, engine=replace(dep.config.engine, v0_block_manager=False))
    v1 = simulate(v1_rules, spec, 0).metrics
    assert v0["completed"] == v1["completed"] == 60
    assert v0["num_preemptions"] * 4 < v1["num_preemptions"]
