"""The event loop: exact times on a flat-cost GPU, and the fast paths equal to the reference."""

from __future__ import annotations

import gc
import json
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvwise.sim.runner import simulate
from kvwise.sim.workloads import Session, Turn, Workload, WorkloadSpec, build_workload
from tests.sim.factories import flat_config

# flat_config: a step costs 10 ms + 1 ms per request in it; requests reach the engine 5 ms
# after they are sent.


def one_request(prompt: int, output: int, start_s: float = 0.0) -> Workload:
    turn = Turn(((1, prompt),), output, output)
    return Workload("random", (Session((turn,), keeps_history=False),), (start_s,), None)


def test_a_lone_request_takes_one_step_per_token() -> None:
    m = simulate(flat_config(), one_request(prompt=10, output=5)).metrics
    assert m["mean_ttft_ms"] == pytest.approx(5 + 11)  # API overhead + one prefill step
    assert m["mean_tpot_ms"] == pytest.approx(11)
    assert m["mean_e2el_ms"] == pytest.approx(5 + 5 * 11)
    assert m["num_steps"] == 5
    assert m["duration"] == pytest.approx(0.060)


def test_a_run_leaves_what_the_process_froze_frozen_and_the_collector_on() -> None:
    """A process that froze its start-up objects (the gateway does) keeps them frozen."""
    froze_here = gc.get_freeze_count() == 0  # earlier tests may have started a gateway
    if froze_here:
        gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        simulate(flat_config(), one_request(prompt=10, output=5))
        assert gc.get_freeze_count() == frozen
        assert gc.isenabled()
    finally:
        if froze_here:
            gc.unfreeze()


def test_a_long_prompt_is_chunked_by_the_token_budget() -> None:
    m = simulate(flat_config(max_num_batched_tokens=64), one_request(prompt=150, output=2)).metrics
    assert m["mean_ttft_ms"] == pytest.approx(5 + 3 * 11)  # 64 + 64 + 22 tokens


def test_an_arrival_waits_for_the_step_in_progress() -> None:
    turns = [Session((Turn(((i, 4),), 3, 3),), keeps_history=False) for i in (1, 2)]
    # the second request reaches the engine 3 ms into the first request's first step
    workload = Workload("random", tuple(turns), (0.0, 0.003), None)
    result = simulate(flat_config(), workload)
    first, second = sorted(result.engine.finished, key=lambda r: r.request_id)
    assert first.first_token_s == pytest.approx(0.005 + 0.011)
    # seen at the boundary (16 ms), then a step with both requests (12 ms)
    assert second.first_token_s - second.sent_s == pytest.approx(0.016 + 0.012 - 0.003)


def test_too_long_requests_are_rejected_like_vllm_does() -> None:
    spec = WorkloadSpec("random", num_prompts=3, input_len=500, output_len=20)  # 520 > 512
    m = simulate(flat_config(), spec).metrics
    assert (m["completed"], m["rejected"]) == (0, 3)


def test_closed_loop_never_exceeds_its_concurrency() -> None:
    spec = WorkloadSpec("random", num_prompts=40, input_len=16, output_len=8, max_concurrency=3)
    result = simulate(flat_config(), spec)
    assert max(running for _, _, running, _ in result.engine.samples) <= 3
    assert result.metrics["completed"] == 40


def test_the_same_seed_gives_the_same_json_and_another_seed_does_not() -> None:
    spec = WorkloadSpec("sharegpt", num_prompts=200, input_len=200, output_len=150, request_rate=20)
    runs = [
        json.dumps(simulate(flat_config(), spec, seed).metrics, sort_keys=True)
        for seed in (3, 3, 4)
    ]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def _specs() -> st.SearchStrategy[WorkloadSpec]:
    common = {"num_prompts": st.integers(5, 40), "request_rate": st.sampled_from([None, 5.0, 50.0])}
    random_spec = st.builds(
        WorkloadSpec,
        kind=st.just("random"),
        input_len=st.integers(1, 120),
        output_len=st.integers(1, 40),
        range_ratio=st.sampled_from([0.0, 0.5]),
        **common,
    )
    agent_spec = st.builds(
        WorkloadSpec,
        kind=st.just("agent"),
        sessions=st.integers(1, 5),
        turns=st.integers(1, 5),
        system_prompt_tokens=st.integers(0, 40),
        user_tokens=st.integers(1, 20),
        tool_output_tokens=st.integers(0, 30),
        output_len=st.integers(1, 30),
        think_time_s=st.sampled_from([0.0, 0.05]),
    )
    shared_spec = st.builds(
        WorkloadSpec,
        kind=st.just("shared-prefix"),
        num_groups=st.integers(1, 3),
        prompts_per_group=st.integers(1, 3),
        system_prompt_tokens=st.integers(0, 30),
        user_tokens=st.integers(1, 30),
        output_len=st.integers(1, 20),
        **common,
    )
    return st.one_of(random_spec, agent_spec, shared_spec)


@settings(max_examples=60, deadline=None)
@given(
    spec=_specs(),
    num_blocks=st.integers(12, 120),
    budget=st.sampled_from([16, 48, 256]),
    max_num_seqs=st.sampled_from([2, 4, 64]),
    reserve_full_isl=st.booleans(),
    seed=st.integers(0, 3),
    token_s=st.sampled_from([0.0, 0.004]),
    v0_block_manager=st.booleans(),
)
def test_fast_paths_match_the_reference_scheduler_bit_for_bit(
    spec: WorkloadSpec,
    num_blocks: int,
    budget: int,
    max_num_seqs: int,
    reserve_full_isl: bool,
    seed: int,
    token_s: float,
    v0_block_manager: bool,
) -> None:
    config = flat_config(
        num_blocks,
        max_num_batched_tokens=budget,
        max_num_seqs=max_num_seqs,
        reserve_full_isl=reserve_full_isl,
    )
    # with an API server slower than the steps (frontend.py) as well: its token stream too
    config = replace(config, coefficients=replace(config.coefficients, frontend_token_s=token_s))
    # V0 with chunked prefill (VLLM_USE_V1=0 above 32K context) takes the fast paths too
    config = replace(config, engine=replace(config.engine, v0_block_manager=v0_block_manager))
    workload = build_workload(spec, random.Random(seed))
    fast = simulate(config, workload, fast=True)
    reference = simulate(config, workload, fast=False)
    assert json.dumps(fast.metrics, sort_keys=True) == json.dumps(reference.metrics, sort_keys=True)
    assert fast.engine.itl_hist == reference.engine.itl_hist
    assert fast.engine.samples == reference.engine.samples
    per_request = [
        sorted((r.request_id, r.first_token_s, r.finish_s, r.num_preemptions) for r in e.finished)
        for e in (fast.engine, reference.engine)
    ]
    assert per_request[0] == per_request[1]
