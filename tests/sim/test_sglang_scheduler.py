"""SGLang's scheduler variant against vLLM's, where a user would see the difference: prefix-cache
hits to the token (radix cache, page_size 1) instead of to the block, and retraction with an
answer-room reservation instead of preemption by recompute."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from kvwise.sim.runner import simulate
from kvwise.sim.sglang_scheduler import SglangScheduler
from kvwise.sim.workloads import WorkloadSpec, build_workload
from tests.sim.factories import flat_config

# odd sizes, so that a session's history rarely ends on a 16-token boundary
AGENT = WorkloadSpec(
    kind="agent",
    sessions=3,
    turns=4,
    system_prompt_tokens=2000,  # a multiple of 16: both granularities hit it whole
    user_tokens=203,
    tool_output_tokens=801,
    output_len=37,
    think_time_s=0.5,
).validate()


def _predicted_extra_hits(block_size: int) -> int:
    """What matching to the token gains over matching to `block_size`-token blocks, from the
    workload alone: turn k (k >= 2) finds the whole previous turn cached, its prompt and its
    answer but the last answer token (sampled, never fed back): h tokens to the token,
    h - h mod block_size to the block."""
    workload = build_workload(AGENT, random.Random(0))
    extra = 0
    for session in workload.sessions:
        history = 0
        for index, turn in enumerate(session.turns):
            if index:
                extra += (history - 1) % block_size
            prompt = history + sum(n for _, n in turn.new_segments)
            history = prompt + turn.output_len
    return extra


def _hits(block_size: int) -> int:
    # a pool that keeps every session's history: no eviction
    config = flat_config(
        200_000 // block_size,
        block_size=block_size,
        max_num_batched_tokens=2048,
        max_model_len=16_384,
        max_num_seqs=16,
    )
    config = replace(config, engine=replace(config.engine, scheduler="sglang"))
    result = simulate(config, AGENT, seed=0)
    assert result.metrics["completed"] == 12 and result.metrics["num_preemptions"] == 0
    return int(result.engine.scheduler.prefix_hit_tokens)


def test_token_granular_hits_beat_block_granular_ones_by_the_predicted_amount() -> None:
    extra = _predicted_extra_hits(16)
    assert extra > 40  # the workload does exercise the difference (9 turns, mod 16 each)
    assert _hits(1) - _hits(16) == extra


def _pressure(scheduler: str) -> tuple[int, int]:
    """(preemptions or retractions, completed) on a pool far too small for the batch's answers."""
    config = flat_config(
        400, block_size=16, max_num_seqs=64, max_num_batched_tokens=2048, max_model_len=4096
    )
    config = replace(config, engine=replace(config.engine, scheduler=scheduler))
    spec = WorkloadSpec(kind="random", num_prompts=48, input_len=300, output_len=400)
    result = simulate(config, spec.validate(), seed=0)
    if scheduler == "sglang":
        assert isinstance(result.engine.scheduler, SglangScheduler)
    return result.metrics["num_preemptions"], result.metrics["completed"]


def test_retraction_with_answer_room_interrupts_far_fewer_requests_than_recompute() -> None:
    """vLLM admits on the prompt alone and preempts when the answers outgrow the pool; SGLang
    keeps room for min(max_new_tokens, 4096) x new_token_ratio of every running answer, so it
    admits fewer at once and retracts far less."""
    vllm_preemptions, vllm_done = _pressure("vllm")
    sglang_retractions, sglang_done = _pressure("sglang")
    assert vllm_done == sglang_done == 48
    assert vllm_preemptions >= 20
    assert sglang_retractions * 4 <= vllm_preemptions


@pytest.mark.parametrize("num_blocks", [40, 80, 160, 640])
def test_every_request_finishes_from_a_tight_pool_to_an_ample_one(num_blocks: int) -> None:
    """Long prompts chunked over several steps and long answers, on pools from barely one
    request to all of them: retraction must never leave the engine stuck."""
    config = flat_config(
        num_blocks, block_size=16, max_num_seqs=32, max_num_batched_tokens=128,
        max_model_len=min(600, (num_blocks - 1) * 16),
    )  # fmt: skip
    config = replace(config, engine=replace(config.engine, scheduler="sglang"))
    spec = WorkloadSpec(kind="random", num_prompts=24, input_len=300, output_len=200,
                        range_ratio=0.5, request_rate=50.0)  # fmt: skip
    metrics = simulate(config, spec.validate(), seed=1).metrics
    assert metrics["completed"] + metrics["rejected"] == 24
    assert metrics["completed"] >= 20
