"""Replicas that accept connections and then say nothing (a hung process, a wedged GPU): the
fake upstream (not an engine) hangs on request or goes silent mid-stream."""

from __future__ import annotations

import time

import httpx

from tests.fake_upstream import Behaviour
from tests.gateway.servers import (
    fake_upstreams,
    make_config,
    running_gateway,
    tokens_before_a_mid_stream_failure,
    wait_until,
)

CHAT = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
FAST_PROBES = {"health_interval_s": 0.1, "health_timeout_s": 0.3, "health_failures": 2}


def test_a_hung_replica_is_marked_down_its_requests_go_elsewhere_and_it_comes_back() -> None:
    with fake_upstreams(Behaviour(), Behaviour()) as ups:
        config = make_config([url for url, _ in ups], stall_timeout_s=30, **FAST_PROBES)
        with running_gateway(config) as gw:
            ups[0][1].behaviour.is_hung = True
            started_s = time.monotonic()
            for i in range(4):  # some sessions hash to the hung one; none waits out a timeout
                for stream in (False, True):
                    body = {**CHAT, "stream": stream}
                    response = httpx.post(
                        f"{gw.url}/v1/chat/completions", json=body,
                        headers={"x-session-id": f"s{i}"}, timeout=20,
                    )  # fmt: skip
                    assert response.status_code == 200, response.text
                    assert response.headers["x-kvwise-replica"] == "r1"
                    assert "t2" in response.text
            assert time.monotonic() - started_s < 5
            assert not gw.gateway.replicas[0].is_healthy
            ups[0][1].behaviour.is_hung = False
            assert wait_until(lambda: gw.gateway.replicas[0].is_healthy, timeout_s=5)


def test_a_waiting_request_moves_when_its_replica_is_found_hung() -> None:
    """The request was sent before the replica was known to be hung: it waits for an answer
    (a whole reply takes as long as it takes) until the probes mark the replica down."""
    with fake_upstreams(Behaviour(), Behaviour()) as ups:
        config = make_config([url for url, _ in ups], **FAST_PROBES)
        with running_gateway(config) as gw:
            gw.gateway.replicas[1].is_healthy = False  # everything goes to r0 first
            ups[1][1].behaviour.is_hung = False
            ups[0][1].behaviour.is_hung = True
            started_s = time.monotonic()
            response = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT, timeout=20)
            assert response.status_code == 200, response.text
            assert response.headers["x-kvwise-replica"] == "r1"
            assert time.monotonic() - started_s < 5


def test_a_stream_that_goes_silent_ends_with_a_clean_error() -> None:
    with fake_upstreams(Behaviour(stall_after_tokens=2)) as ups:
        config = make_config([ups[0][0]], stall_timeout_s=0.5, health_interval_s=60)
        with running_gateway(config) as gw:
            started_s = time.monotonic()
            assert tokens_before_a_mid_stream_failure(gw.url, CHAT) == ["", "t0 ", "t1 "]
            assert time.monotonic() - started_s < 3
            assert not gw.gateway.replicas[0].is_healthy
            assert gw.gateway.metrics.broken_streams.get() == 1
