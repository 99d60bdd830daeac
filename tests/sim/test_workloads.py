"""Workloads: deterministic for a seed, shared prefixes really shared, arrivals as specified."""

from __future__ import annotations

import itertools
import json
import random
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from kvwise.errors import DataError, UsageError
from kvwise.sim.runner import simulate
from kvwise.sim.workloads import (
    SHAREGPT_MAX_PROMPT,
    SHAREGPT_MAX_TOTAL,
    WorkloadSpec,
    arrival_times,
    build_workload,
    sharegpt_lengths,
)


def build(seed: int = 0, **fields):  # type: ignore[no-untyped-def]
    return build_workload(WorkloadSpec(**fields), random.Random(seed))


def test_same_seed_same_workload() -> None:
    for kind in ("random", "sharegpt", "agent", "shared-prefix"):
        assert build(7, kind=kind, request_rate=3.0, range_ratio=0.3) == build(
            7, kind=kind, request_rate=3.0, range_ratio=0.3
        )
    assert build(1, kind="sharegpt", num_prompts=50) != build(2, kind="sharegpt", num_prompts=50)


def test_agent_sessions_share_the_system_prompt_and_grow_turn_by_turn() -> None:
    w = build(
        kind="agent",
        sessions=3,
        turns=4,
        system_prompt_tokens=2000,
        user_tokens=100,
        tool_output_tokens=800,
        output_len=300,
        think_time_s=1.5,
    )
    assert w.start_times_s is None and w.max_concurrency == 3  # all sessions side by side
    first_turns = [s.turns[0] for s in w.sessions]
    system_ids = {t.new_segments[0] for t in first_turns}
    assert system_ids == {(1, 2000)}  # one segment id: the same tokens in every session
    later = w.sessions[0].turns[1]
    assert [n for _, n in later.new_segments] == [800, 100]  # tool output, then user text
    assert all(s.keeps_history for s in w.sessions)
    thinks = [t.think_time_s for s in w.sessions for t in s.turns[1:]]
    assert all(t > 0 for t in thinks) and w.sessions[0].turns[0].think_time_s == 0


def test_shared_prefix_groups_share_their_system_prompt() -> None:
    w = build(
        kind="shared-prefix",
        num_prompts=20,
        num_groups=2,
        prompts_per_group=5,
        system_prompt_tokens=100,
    )
    systems = [s.turns[0].new_segments[0][0] for s in w.sessions]
    assert systems[:10] == [systems[0]] * 5 + [systems[5]] * 5  # users 0-4 group 0, 5-9 group 1
    assert systems[0] != systems[5]
    assert systems[10:] == systems[:10]  # requests cycle over the users


def test_sharegpt_lengths_have_the_requested_means_within_vllms_filter() -> None:
    lengths = sharegpt_lengths(2000, 220, 200, random.Random(0))
    assert statistics.mean(p for p, _ in lengths) == pytest.approx(220, rel=0.02)
    assert statistics.mean(o for _, o in lengths) == pytest.approx(200, rel=0.02)
    assert all(
        4 <= p <= SHAREGPT_MAX_PROMPT and o >= 4 and p + o <= SHAREGPT_MAX_TOTAL for p, o in lengths
    )
    outputs = sorted(o for _, o in lengths)
    assert outputs[len(outputs) // 2] < 0.8 * statistics.mean(outputs)  # heavy tail: median < mean


def test_arrivals_poisson_constant_and_all_at_once() -> None:
    poisson = arrival_times(4000, 10.0, random.Random(0))
    assert poisson[0] == 0.0 and poisson[-1] / len(poisson) == pytest.approx(0.1, rel=0.05)
    assert arrival_times(4, 2.0, random.Random(0), arrival="constant") == (0.0, 0.5, 1.0, 1.5)
    assert arrival_times(3, None, random.Random(0)) == (0.0, 0.0, 0.0)
    gaps = [b - a for a, b in itertools.pairwise(poisson)]
    bursty = arrival_times(4000, 10.0, random.Random(0), burstiness=0.25)
    bursty_gaps = [b - a for a, b in itertools.pairwise(bursty)]
    assert statistics.pstdev(bursty_gaps) > 1.5 * statistics.pstdev(gaps)  # same mean, burstier


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "chatty"}, "unknown workload 'chatty'"),
        ({"kind": "random", "request_rate": -1.0}, "--request-rate must be positive"),
        ({"kind": "random", "max_concurrency": 0}, "--max-concurrency must be at least 1"),
        ({"kind": "agent", "think_time_s": -2.0}, "--think-time-s must not be negative"),
        ({"kind": "replay"}, "needs a FILE.jsonl"),
    ],
)
def test_bad_specs_say_what_is_wrong(fields: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        WorkloadSpec(**fields).validate()


def test_replay_of_lengths_and_of_message_logs(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    system = {"role": "system", "content": "You are a careful agent. " * 20}
    lines = [
        {"timestamp_s": 12.0, "input_len": 300, "output_len": 40},
        {
            "timestamp_s": 10.0,
            "messages": [system, {"role": "user", "content": "first task"}],
            "max_tokens": 64,
        },
        {
            "timestamp_s": 11.0,
            "messages": [system, {"role": "user", "content": "second task"}],
            "max_tokens": 64,
            "output_len": 20,
        },
    ]
    log.write_text("\n".join(json.dumps(line) for line in lines))
    w = build(kind="replay", replay_path=str(log))
    assert w.start_times_s == (0.0, 1.0, 2.0)  # sorted, shifted to start at 0
    a, b, c = (s.turns[0] for s in w.sessions)
    assert a.new_segments[0] == b.new_segments[0]  # the same system message: the same segment
    assert a.new_segments[0][1] == len(system["content"]) // 4 + 4
    assert (a.max_tokens, a.output_len, b.output_len) == (64, 64, 20)
    assert c.new_segments[0][1] == 300 and c.output_len == 40


def test_a_bad_replay_line_names_its_line(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text('{"input_len": 10}\n{"input_len": 10, "colour": "red"}\n')
    with pytest.raises(DataError, match=r"log.jsonl:2: colour"):
        build(kind="replay", replay_path=str(log))


def test_a_warm_cache_turns_repeated_prompts_into_prefix_hits() -> None:
    from tests.sim.factories import flat_config

    spec = WorkloadSpec("random", num_prompts=20, input_len=64, output_len=4, request_rate=5.0)
    # 20 prompts of 16 blocks fit a pool of 511 (in a smaller one, LRU eviction in send order
    # would evict each prompt just before it is sent again, as vLLM's would)
    config = flat_config(num_gpu_blocks=512)
    cold = simulate(config, spec, seed=3)
    warm = simulate(config, spec, seed=3, warm_cache=True)
    assert cold.metrics["prefix_cache_hit_rate"] == 0
    # every 64-token prompt finds its first 60 tokens (15 full 4-token blocks of the 63 a
    # lookup may cover) in the cache
    assert warm.metrics["prefix_cache_hit_rate"] == pytest.approx(60 / 64)
    # without prefix caching there is nothing to warm
    off = flat_config(enable_prefix_caching=False)
    assert (
        simulate(off, spec, seed=3, warm_cache=True).metrics == simulate(off, spec, seed=3).metrics
    )


def test_a_warm_cache_keeps_the_newest_prompts_when_the_pool_is_too_small() -> None:
    from kvwise.sim.kv_cache_manager import KVCacheManager
    from kvwise.sim.request import Request
    from kvwise.sim.warm import warm_prefix_cache

    workload = build_workload(
        WorkloadSpec("random", num_prompts=10, input_len=40), random.Random(0)
    )
    kv_cache = KVCacheManager(31, 4, enable_prefix_caching=True, max_model_len=120)
    assert warm_prefix_cache(kv_cache, workload) == 10
    assert kv_cache.pool.num_free_blocks == 30  # all of them back in the free queue, cached

    def cached_blocks(index: int) -> int:
        prompt = list(workload.sessions[index].turns[0].new_segments)
        return len(kv_cache.get_computed_blocks(Request(0, prompt, 1, output_seg_id=-1)))

    # 30 usable blocks hold the last three 10-block prompts (9 blocks of each can be hits: a
    # lookup leaves the last token to compute); the earlier ones were evicted, oldest first
    assert [cached_blocks(i) for i in range(10)] == [0] * 7 + [9] * 3


def test_an_earlier_smaller_run_leaves_its_prompts_cached_for_the_next_one() -> None:
    """vLLM's benchmark draws the same first prompts for any --num-prompts: a 20-prompt run
    after a 10-prompt one on the same server finds those 10 in the prefix cache."""
    from tests.sim.factories import flat_config

    spec = WorkloadSpec("random", num_prompts=20, input_len=64, output_len=4)
    earlier = replace(spec, num_prompts=10)
    config = flat_config(num_gpu_blocks=512)
    cold = simulate(config, spec, seed=3)
    after = simulate(config, spec, seed=3, earlier_runs=(earlier,))
    assert cold.metrics["prefix_cache_hit_rate"] == 0
    # half the prompts find 60 of their 64 tokens cached (15 full 4-token blocks)
    assert after.metrics["prefix_cache_hit_rate"] == pytest.approx(60 / 64 / 2)
    # less to prefill: the first tokens come sooner
    assert after.metrics["median_ttft_ms"] < cold.metrics["median_ttft_ms"]


def test_the_answers_of_an_earlier_run_take_room_in_the_cache() -> None:
    """An earlier run's answers are cached too: when its prompts and answers overflow the
    pool, its oldest prompts are gone (evicted first), though its prompts alone would fit."""
    from kvwise.sim.kv_cache_manager import KVCacheManager
    from kvwise.sim.request import Request
    from kvwise.sim.warm import replay_earlier_runs

    spec = WorkloadSpec("random", num_prompts=10, input_len=40, output_len=20)
    workload = build_workload(spec, random.Random(0))
    kv_cache = KVCacheManager(61, 4, enable_prefix_caching=True, max_model_len=120)
    assert replay_earlier_runs(kv_cache, [workload]) == 10

    def cached_blocks(index: int) -> int:
        prompt = list(workload.sessions[index].turns[0].new_segments)
        return len(kv_cache.get_computed_blocks(Request(0, prompt, 1, output_seg_id=-1)))

    # 60 usable blocks: 10 prompts of 10 blocks would all fit, but each answer adds 5, so
    # only the last four prompts (with their answers) stay
    assert [cached_blocks(i) for i in range(10)] == [0] * 6 + [9] * 4
