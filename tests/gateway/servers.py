"""Loopback servers for the gateway tests: the gateway (uvicorn in a thread) and the fake upstream.

The gateway runs for real (uvicorn, sockets, its own event loop in a background thread) so that
the clients under test (the `openai` package, httpx) talk HTTP to it exactly as users do.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import httpx
import uvicorn

from kvwise.gateway.admission import AdmissionConfig
from kvwise.gateway.app import Gateway, create_app
from kvwise.gateway.config import GatewayConfig, SecurityConfig, SessionConfig, UpstreamSpec
from kvwise.gateway.server_limits import uvicorn_config
from kvwise.gateway.sessions import SessionCaps
from tests.engine_fixture import free_port
from tests.fake_upstream import Behaviour, FakeUpstream

T = TypeVar("T")


def make_config(
    urls: list[str],
    budget_tokens: int = 100_000,
    max_model_len: int = 2048,
    *,
    max_queue: int = 64,
    queue_timeout_s: float = 30.0,
    **changes: Any,
) -> GatewayConfig:
    upstreams = tuple(UpstreamSpec(f"r{i}", url, budget_tokens) for i, url in enumerate(urls))
    config = GatewayConfig(
        upstreams=upstreams,
        max_model_len=max_model_len,
        admission=AdmissionConfig(max_queue, queue_timeout_s),
        security=SecurityConfig(),
        sessions=None,
        health_interval_s=0.2,
    )
    return replace(config, **changes)


def session_config(store: str, history: bool = True, **changes: Any) -> SessionConfig:
    caps = SessionCaps(ttl_s=3600, max_messages=1000, max_bytes=2**20)
    config = SessionConfig(store, caps, history, reply_reserve_tokens=64, max_prompt_tokens=None)
    return replace(config, **changes)


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """For state the gateway settles just after the client has its last byte."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def wait_listening(url: str, timeout_s: float = 20.0) -> bool:
    """For a `kvwise serve` subprocess: it prints its limits just before it listens."""

    def answers() -> bool:
        try:
            httpx.get(f"{url}/health")
        except httpx.TransportError:
            return False
        return True

    return wait_until(answers, timeout_s)


@dataclass
class RunningGateway:
    url: str
    gateway: Gateway
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        if self.thread.is_alive():  # it would go on polling replicas and stores after the test
            raise RuntimeError("the gateway did not shut down within 30 s")


def start_gateway(config: GatewayConfig) -> RunningGateway:
    app = create_app(config)
    port = free_port()
    server = uvicorn.Server(
        uvicorn_config(app, "127.0.0.1", port, config.server, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("gateway did not start")
        time.sleep(0.02)
    return RunningGateway(f"http://127.0.0.1:{port}", app.state.gateway, server, thread)


@contextmanager
def running_gateway(config: GatewayConfig) -> Iterator[RunningGateway]:
    running = start_gateway(config)
    try:
        yield running
    finally:
        running.stop()


class LoopThread:
    """An event loop in a background thread, for servers the test thread talks to."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        # as asyncio.run ends: tasks still serving a connection are cancelled and finish (their
        # transports close), so nothing is left for the garbage collector to warn about later
        self.run(_finish_other_tasks())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


async def _finish_other_tasks() -> None:
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
    await asyncio.sleep(0)  # the closed transports' connection_lost callbacks


@contextmanager
def fake_upstreams(*behaviours: Behaviour) -> Iterator[list[tuple[str, FakeUpstream]]]:
    """Fake upstreams (a fake, not an engine: for failure injection and timing), with their URLs."""
    loop = LoopThread()
    servers = [FakeUpstream(b, name="fake") for b in behaviours]
    try:
        ports = [loop.run(s.start()) for s in servers]
        yield [(f"http://127.0.0.1:{p}", s) for p, s in zip(ports, servers, strict=True)]
    finally:
        for server in servers:
            loop.run(server.stop())
        loop.close()


def tokens_before_a_mid_stream_failure(gateway_url: str, chat: dict[str, Any]) -> list[str | None]:
    """Stream `chat` through the gateway with the real `openai` client; the stream must end with
    the gateway's "failed mid-stream" error event. Returns the contents received before it."""
    import openai
    import pytest

    async def scenario() -> list[str | None]:
        async with openai.AsyncOpenAI(
            base_url=f"{gateway_url}/v1", api_key="x", max_retries=0
        ) as api:
            stream = await api.chat.completions.create(**chat, stream=True)
            received = []
            with pytest.raises(openai.APIError, match="failed mid-stream"):
                async for chunk in stream:
                    received.append(chunk.choices[0].delta.content)
            return received

    return asyncio.run(scenario())
