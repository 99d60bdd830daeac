"""The API server in front of the engine: a latency for every request, a queue for its CPU,
and its CPU streaming every output token back."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from kvwise.sim.frontend import FrontEndQueue
from kvwise.sim.runner import SimConfig, simulate
from kvwise.sim.workloads import WorkloadSpec
from tests.sim.factories import flat_config


def test_a_burst_queues_for_the_servers_cpu_one_request_at_a_time() -> None:
    queue = FrontEndQueue(api_overhead_s=0.010, frontend_request_s=0.004)
    arrivals = [queue.arrival_s(0.0) for _ in range(3)]
    assert arrivals == pytest.approx([0.014, 0.018, 0.022])
    # the server is idle again by 0.5 s: a request sent then waits for nobody
    assert queue.arrival_s(0.5) == pytest.approx(0.514)
    # sent while the third was still being served (0.012 < 0.012 + 0.004): it queues behind it
    queue2 = FrontEndQueue(api_overhead_s=0.0, frontend_request_s=0.004)
    assert [queue2.arrival_s(s) for s in (0.0, 0.001, 0.002)] == pytest.approx(
        [0.004, 0.008, 0.012]
    )
    assert queue2.queued == [(1, 0.0), (2, -0.001), (3, -0.002)]


def test_without_cpu_cost_every_request_only_pays_the_latency() -> None:
    queue = FrontEndQueue(api_overhead_s=0.010, frontend_request_s=0.0)
    assert [queue.arrival_s(s) for s in (0.0, 0.0, 0.3, 0.1)] == [0.010, 0.010, 0.310, 0.110]


def test_the_front_end_cpu_raises_ttft_at_a_burst_but_not_at_low_load() -> None:
    config = flat_config()
    slow_frontend = replace(
        config, coefficients=replace(config.coefficients, frontend_request_s=0.02)
    )
    burst = WorkloadSpec("random", num_prompts=40, input_len=32, output_len=8)
    trickle = replace(burst, request_rate=1.0, arrival="constant")
    ttft = {
        (name, label): simulate(c, w, seed=0).metrics["median_ttft_ms"]
        for name, w in (("burst", burst), ("trickle", trickle))
        for label, c in (("base", config), ("cpu", slow_frontend))
    }
    # 40 requests at once: the median one (the 20th) reaches the engine after 20 x 20 ms of CPU
    assert ttft["burst", "cpu"] >= 20 * 20
    assert ttft["burst", "cpu"] > ttft["burst", "base"] + 100
    # one request a second: the CPU is idle when each arrives, 20 ms is all it adds
    assert ttft["trickle", "cpu"] - ttft["trickle", "base"] == pytest.approx(20, abs=1)


def _with_token_s(token_s: float) -> SimConfig:
    config = flat_config(max_num_seqs=16)
    return replace(config, coefficients=replace(config.coefficients, frontend_token_s=token_s))


def test_a_slow_api_server_caps_output_tokens_per_second_at_its_cpu() -> None:
    burst = WorkloadSpec("random", num_prompts=200, input_len=32, output_len=64)
    gpu_only = simulate(_with_token_s(0.0), burst, seed=0).metrics
    # 16 decoders x 5 ms of CPU a token = 80 ms per step's tokens, the steps take ~26 ms
    capped = simulate(_with_token_s(0.005), burst, seed=0).metrics
    assert gpu_only["output_throughput"] > 1.5 / 0.005  # the GPU alone: over 300 tokens/s
    assert capped["output_throughput"] <= 1 / 0.005 * 1.001
    assert capped["output_throughput"] == pytest.approx(1 / 0.005, rel=0.03)
    # the backlog reaches the clients: every token comes later, the last ones much later
    assert capped["mean_tpot_ms"] > gpu_only["mean_tpot_ms"] * 2
    assert capped["median_ttft_ms"] > gpu_only["median_ttft_ms"]
    assert capped["median_e2el_ms"] > gpu_only["median_e2el_ms"] * 2


def test_an_api_server_faster_than_the_gpu_changes_nothing() -> None:
    # 16 decoders x 50 us = 0.8 ms of CPU per ~26 ms step: it has caught up before each step
    # ends, and its work on a step's own tokens is in api_overhead_s already
    burst = WorkloadSpec("random", num_prompts=200, input_len=32, output_len=64)
    gpu_only = simulate(_with_token_s(0.0), burst, seed=0).metrics
    fast_cpu = simulate(_with_token_s(50e-6), burst, seed=0).metrics
    for figure in ("output_throughput", "median_ttft_ms", "mean_tpot_ms", "median_e2el_ms"):
        assert fast_cpu[figure] == gpu_only[figure]


def test_a_client_sends_its_next_request_after_the_answer_was_streamed() -> None:
    # closed loop, one client: the API server (30 ms a token) is far slower than the steps
    chat = WorkloadSpec("random", num_prompts=20, input_len=16, output_len=32, max_concurrency=1)
    base = simulate(_with_token_s(0.0), chat, seed=0)
    slow = simulate(_with_token_s(0.030), chat, seed=0)
    done = sorted(slow.engine.finished, key=lambda r: r.sent_s)
    # the client sees an answer's end once the CPU is through its first 31 tokens (30 ms
    # each), and sends the next request only then
    assert all(r.finish_s - r.sent_s >= 31 * 0.030 for r in done)
    assert all(b.sent_s >= a.finish_s for a, b in itertools.pairwise(done))
    # so the run takes at least the CPU's time for those tokens, more than the GPU's alone
    tokens = slow.metrics["total_output_tokens"] - slow.metrics["completed"]
    assert slow.metrics["duration"] >= tokens * 0.030 > base.metrics["duration"]
