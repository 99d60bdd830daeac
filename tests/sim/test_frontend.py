"""The API server in front of the engine: a latency for every request, a queue for its CPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvwise.sim.frontend import FrontEndQueue
from kvwise.sim.runner import simulate
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
