"""A replica killed mid-run, with two real engine processes: requests that had not streamed a
token complete on the other replica; streams that had end with a clean error event."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import openai
import pytest

from tests.engine_fixture import SERVED_MODEL_NAME, EngineProcess, PausedEngine, tiny_model_dir
from tests.gateway.servers import make_config, running_gateway, wait_until

pytestmark = pytest.mark.engine

QUESTION = [{"role": "user", "content": "Count to a thousand."}]
# long enough that the engine, let run a few ms at a time, cannot finish a reply by accident
MAX_TOKENS = 1800


async def whole(api: openai.AsyncOpenAI, session: str) -> int:
    reply = await api.chat.completions.create(
        model=SERVED_MODEL_NAME, messages=QUESTION, max_tokens=MAX_TOKENS, user=session,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert reply.usage is not None
    return reply.usage.completion_tokens


async def streamed(api: openai.AsyncOpenAI, session: str, first_token: asyncio.Event) -> str:
    stream = await api.chat.completions.create(
        model=SERVED_MODEL_NAME, messages=QUESTION, max_tokens=MAX_TOKENS, user=session, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )  # fmt: skip
    num_events = 0
    try:
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                num_events += 1
                first_token.set()
            if chunk.usage is not None:
                return f"complete: {chunk.usage.completion_tokens}"
    except openai.APIError as exc:
        return f"error after {num_events} events: {exc.message}"
    return "ended without usage"


def test_killed_replica_costs_no_request_that_had_not_streamed(
    vllm_engine: EngineProcess, tmp_path: Path
) -> None:
    """One stream has tokens out of the doomed replica; nine more requests are spread over both
    replicas while both engines are frozen (so none finishes or streams by chance); then the
    doomed one is killed and the other resumed."""
    doomed = EngineProcess(log_path=tmp_path / "doomed.log").start()
    try:
        config = make_config([doomed.url, vllm_engine.url], tokenizer_path=str(tiny_model_dir()))
        with running_gateway(config) as gw:
            doomed_replica = gw.gateway.replicas[0]
            assert wait_until(lambda: all(r.is_healthy for r in gw.gateway.replicas), timeout_s=30)
            # a session the ring sends to the doomed replica while both are idle
            first = next(
                f"s{i}"
                for i in range(1000)
                if gw.gateway.admission.router.ring_order(f"session:s{i}")[0] is doomed_replica
            )

            async def scenario() -> tuple[list[int], list[str]]:
                api = openai.AsyncOpenAI(
                    base_url=f"{gw.url}/v1", api_key="unused", max_retries=0, timeout=300
                )
                first_token = asyncio.Event()
                stepper = PausedEngine(doomed.pause())  # never resumed: it is killed
                streams = [asyncio.create_task(streamed(api, first, first_token))]
                try:
                    for _ in range(300):  # a few tokens at a time until the client has one
                        stepper.step()
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(first_token.wait(), 0.2)
                            break
                finally:
                    stepper.close()
                assert first_token.is_set(), "the doomed replica never streamed a token"
                metrics = gw.gateway.metrics
                assert doomed_replica.num_in_flight == 1, (
                    [(r.num_in_flight, r.is_healthy) for r in gw.gateway.replicas],
                    [line for line in metrics.registry.render().splitlines() if "total" in line],
                    streams[0].done() and streams[0].result(),
                    f"longest engine step {stepper.longest_step_s:.3f} s",
                )
                with vllm_engine.paused():
                    streams += [
                        asyncio.create_task(streamed(api, f"t{i}", asyncio.Event()))
                        for i in range(3)
                    ]
                    wholes = [asyncio.create_task(whole(api, f"w{i}")) for i in range(6)]
                    assert await until(lambda: gw.gateway.admission.num_admitted == 10)
                    # bounded-load routing put a share of the nine on the doomed replica
                    assert doomed_replica.num_in_flight >= 3, doomed_replica.num_in_flight
                    doomed.kill()
                outcome = await asyncio.gather(*wholes), await asyncio.gather(*streams)
                await api.close()
                return outcome

            t0 = time.monotonic()
            completion_tokens, stream_outcomes = asyncio.run(scenario())
            assert completion_tokens == [MAX_TOKENS] * 6  # every non-streamed request completed
            assert stream_outcomes[0].startswith("error after"), stream_outcomes
            assert "failed mid-stream" in stream_outcomes[0]
            assert (
                stream_outcomes[1:] == [f"complete: {MAX_TOKENS}"] * 3
            )  # none had streamed: failed over
            assert gw.gateway.metrics.failovers.get() >= 2
            assert not doomed_replica.is_healthy
            assert time.monotonic() - t0 < 240
    finally:
        doomed.stop()


async def until(condition: Callable[[], bool], timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True
