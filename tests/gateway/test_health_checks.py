"""The gateway's health ticks: /health decides up or down, /metrics the engine's load, and a
replica too slow to answer keeps its state for a few probes, then is down.

The replica here is a raw asyncio server scripted per path: the test is about how the gateway
reads the answers (status, body, timing), which needs exact control of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from kvwise.gateway.app import Gateway
from tests.gateway.servers import make_config
from tests.stream_server import StreamServer, start_stream_server

METRICS = (Path(__file__).parent / "data" / "vllm_0.32.0_cpu_metrics_busy.txt").read_bytes()

Answer = Callable[[str], Awaitable[tuple[int, bytes]]]


def http_response(status: int, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status} X\r\ncontent-length: {len(body)}\r\ncontent-type: text/plain\r\n"
    return head.encode() + b"\r\n" + body


async def scripted_replica(answer: Answer) -> tuple[StreamServer, str]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: the gateway reuses its connections
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode()
                status, body = await answer(path)
                writer.write(http_response(status, body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await start_stream_server(handle)
    return server, f"http://127.0.0.1:{server.port}"


async def one_tick(answer: Answer, *, was_healthy: bool = True) -> Gateway:
    server, url = await scripted_replica(answer)
    gateway = Gateway(make_config([url], health_timeout_s=0.2))
    await gateway.start()
    try:
        gateway.replicas[0].is_healthy = was_healthy
        await gateway.check_replicas()
        return gateway
    finally:
        await gateway.stop()
        server.close()


async def healthy(path: str) -> tuple[int, bytes]:
    return (200, METRICS) if path == "/metrics" else (200, b"")


def test_a_healthy_replica_reports_its_engine_load() -> None:
    gateway = asyncio.run(one_tick(healthy, was_healthy=False))
    replica = gateway.replicas[0]
    assert replica.is_healthy
    # the figures in the recorded vLLM 0.32 CPU /metrics
    assert replica.load is not None
    assert abs(replica.load.kv_cache_usage_perc - 1 / 1023) < 1e-9  # one 128-token block in use
    assert replica.load.pool_tokens == 131072
    assert replica.load.block_size == 128


def test_a_replica_that_answers_health_with_an_error_is_marked_down() -> None:
    async def failing(path: str) -> tuple[int, bytes]:
        return (503, b"engine dead") if path == "/health" else (200, METRICS)

    gateway = asyncio.run(one_tick(failing))
    assert not gateway.replicas[0].is_healthy


def test_a_replica_that_refuses_connections_is_marked_down() -> None:
    async def tick() -> Gateway:
        server, url = await scripted_replica(healthy)
        server.close()
        await server.wait_closed()  # nothing listens on the port any more
        gateway = Gateway(make_config([url]))
        await gateway.start()
        try:
            await gateway.check_replicas()
            return gateway
        finally:
            await gateway.stop()

    assert not asyncio.run(tick()).replicas[0].is_healthy


@pytest.mark.parametrize("was_healthy", [True, False])
def test_a_replica_too_slow_to_answer_keeps_its_state(
    monkeypatch: pytest.MonkeyPatch, was_healthy: bool
) -> None:
    """One slow answer is not a dead replica: the next tick asks again."""

    async def stalled(path: str) -> tuple[int, bytes]:
        await asyncio.sleep(2)
        return 200, b""

    gateway = asyncio.run(one_tick(stalled, was_healthy=was_healthy))
    assert gateway.replicas[0].is_healthy is was_healthy


def test_a_replica_silent_for_several_probes_is_down_until_it_answers() -> None:
    """A hung process accepts connections and never answers: down after `health_failures`
    probes in a row, back at the first answer."""
    is_hung = True

    async def answer(path: str) -> tuple[int, bytes]:
        while is_hung:
            await asyncio.sleep(0.05)
        return 200, METRICS if path == "/metrics" else b""

    async def scenario() -> list[bool]:
        nonlocal is_hung
        server, url = await scripted_replica(answer)
        config = make_config([url], health_timeout_s=0.2, health_failures=3, health_interval_s=60)
        gateway = Gateway(config)
        await gateway.start()  # its first check is one probe unanswered
        try:
            states = [gateway.replicas[0].is_healthy]
            for _ in range(2):
                await gateway.check_replicas()
                states.append(gateway.replicas[0].is_healthy)
            is_hung = False
            await gateway.check_replicas()
            states.append(gateway.replicas[0].is_healthy)
            return states
        finally:
            await gateway.stop()
            server.close()

    assert asyncio.run(scenario()) == [True, True, False, True]


def test_stopping_ends_the_health_loop_even_when_a_tick_swallows_the_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Python 3.11's wait_for can return a result that completed as it was cancelled, dropping
    the cancellation; the gateway must still shut down instead of ticking on forever."""
    ticking = asyncio.Event()
    num_swallowed = 0

    async def tick_that_swallows_cancellation(self: Gateway) -> None:
        nonlocal num_swallowed
        if self._health_task is None:
            return  # the check start() makes itself, before the loop runs
        ticking.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            if num_swallowed:
                raise
            num_swallowed += 1  # the race, once: the tick just returns

    monkeypatch.setattr(Gateway, "check_replicas", tick_that_swallows_cancellation)

    async def scenario() -> bool:
        gateway = Gateway(make_config(["http://127.0.0.1:9"], health_interval_s=0.01))
        await gateway.start()
        await asyncio.wait_for(ticking.wait(), timeout=5)
        stopping = asyncio.create_task(gateway.stop())
        done, _ = await asyncio.wait({stopping}, timeout=5)  # waits, never cancels
        if not done:  # the loop ticks on: a second cancellation ends it, and the test
            assert gateway._health_task is not None
            gateway._health_task.cancel()
            await stopping
        return bool(done)

    assert asyncio.run(scenario()), "the gateway did not stop within 5 s"
