"""End to end through the REAL vLLM CPU engine (tiny Qwen2), with the real `openai` client.

One engine serves the whole session (tests/conftest.py). Replies are random text from a random
model, so the tests check what a user of the gateway would notice: statuses, token counts
(`ignore_eos` makes vLLM produce exactly `max_tokens`), headers, what reached the engine, and
the engine's own /metrics.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import httpx
import openai
import pytest

from kvwise.gateway.app import Gateway
from kvwise.gateway.prepare import sequence_cost
from kvwise.gateway.tokens import count_chat, load_tokenizer
from tests.engine_fixture import SERVED_MODEL_NAME, EngineProcess, tiny_model_dir
from tests.gateway.servers import make_config, running_gateway

pytestmark = pytest.mark.engine

QUESTION = [{"role": "user", "content": "Write one line of Python."}]


def client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def cost_of(messages: list[dict[str, str]], max_tokens: int) -> int:
    """What the gateway reserves for one such request (its counting is tested separately)."""
    tokenizer = load_tokenizer(str(tiny_model_dir()))
    return sequence_cost(count_chat(tokenizer, messages), max_tokens, 2048)


def engine_gauge(engine: EngineProcess, name: str) -> float:
    """The engine's value for a series, summed over its label sets (finish reasons...)."""
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in httpx.get(f"{engine.url}/metrics").text.splitlines()
        if line.startswith(name + "{")
    ]
    assert values, f"{name} not in the engine's /metrics"
    return sum(values)


class RunningSampler:
    """Samples the engine's vllm:num_requests_running while a test drives load."""

    def __init__(self, engine: EngineProcess) -> None:
        self.engine = engine
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, engine_gauge(self.engine, "vllm:num_requests_running"))
            time.sleep(0.05)

    def __enter__(self) -> RunningSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


async def streamed_text(api: openai.AsyncOpenAI) -> tuple[list[str | None], int]:
    """The content deltas of a greedy 6-token stream, and the usage's completion tokens."""
    stream = await api.chat.completions.create(
        model=SERVED_MODEL_NAME,
        messages=QUESTION,
        max_tokens=6,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[-1].usage is not None
    return [c.choices[0].delta.content for c in chunks if c.choices], chunks[
        -1
    ].usage.completion_tokens


def test_chat_non_streaming_and_streaming(vllm_engine: EngineProcess) -> None:
    config = make_config([vllm_engine.url], tokenizer_path=str(tiny_model_dir()))

    async def scenario(url: str) -> None:
        async with client(url) as api, client(vllm_engine.url) as direct:
            reply = await api.chat.completions.create(
                model=SERVED_MODEL_NAME,
                messages=QUESTION,
                max_tokens=8,
                extra_body={"ignore_eos": True},
            )
            assert reply.usage is not None and reply.usage.completion_tokens == 8
            assert reply.choices[0].finish_reason == "length"
            # the stream through the gateway is the engine's stream (vLLM itself may put two
            # tokens in one event when its output loop lags, so events are not compared one by one)
            through_gateway, num_tokens = await streamed_text(api)
            straight, num_tokens_straight = await streamed_text(direct)
            assert "".join(filter(None, through_gateway)) == "".join(filter(None, straight))
            assert num_tokens == num_tokens_straight == 6
            assert through_gateway[0] == ""  # the role event comes first
            models = await api.models.list()
            assert [m.id for m in models.data] == [SERVED_MODEL_NAME]

    with running_gateway(config) as gw:
        asyncio.run(scenario(gw.url))


def test_prompt_count_bounds_what_the_engine_counts(vllm_engine: EngineProcess) -> None:
    """The gateway's upper bound is never below the engine's real prompt_tokens."""
    messages = [
        {"role": "system", "content": "You are a careful assistant. Answer in one line."},
        {
            "role": "user",
            "content": "Sort [3, 1, 2] in Python, then explain why sorted() is stable.",
        },
    ]
    reply = httpx.post(
        f"{vllm_engine.url}/v1/chat/completions",
        json={"model": SERVED_MODEL_NAME, "messages": messages, "max_tokens": 1},
    ).json()
    counted = count_chat(load_tokenizer(str(tiny_model_dir())), messages)
    assert counted.lower <= reply["usage"]["prompt_tokens"] <= counted.upper


def test_32_sessions_against_a_budget_of_4_all_complete_within_budget(
    vllm_engine: EngineProcess,
) -> None:
    cost = cost_of(QUESTION, 48)
    config = make_config(
        [vllm_engine.url], budget_tokens=4 * cost + cost // 2, tokenizer_path=str(tiny_model_dir())
    )

    async def session(api: openai.AsyncOpenAI, index: int) -> int:
        reply = await api.chat.completions.create(
            model=SERVED_MODEL_NAME, messages=QUESTION, max_tokens=48, user=f"agent-{index}",
            extra_body={"ignore_eos": True},
        )  # fmt: skip
        assert reply.usage is not None
        return reply.usage.completion_tokens

    async def scenario(url: str) -> list[int]:
        async with client(url) as api:
            return await asyncio.gather(*(session(api, i) for i in range(32)))

    succeeded_before = engine_gauge(vllm_engine, "vllm:request_success_total")
    with running_gateway(config) as gw, RunningSampler(vllm_engine) as sampler:
        completion_tokens = asyncio.run(scenario(gw.url))
        replica = gw.gateway.replicas[0]
        assert completion_tokens == [48] * 32
        assert replica.peak_in_flight == 4
        assert replica.peak_reserved_tokens == 4 * cost
        assert gw.gateway.admission.num_admitted == 32
        assert gw.gateway.admission.num_queued > 0
    # the engine ran all 32 and, whenever it was looked at, never more than the budget's 4
    assert engine_gauge(vllm_engine, "vllm:request_success_total") - succeeded_before == 32
    assert sampler.peak <= 4, sampler.peak


async def ask(api: openai.AsyncOpenAI, session_id: str, max_tokens: int) -> None:
    await api.chat.completions.create(
        model=SERVED_MODEL_NAME, messages=QUESTION, max_tokens=max_tokens, user=session_id,
        extra_body={"ignore_eos": True},
    )  # fmt: skip


async def until(
    condition: Callable[[], bool], state: Callable[[], object], timeout_s: float = 60.0
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, (
            f"the gateway never reached the expected state: {state()}"
        )
        await asyncio.sleep(0.005)


# One rerun. Under a CPU burner, about one run in fifteen fails with every connection to the
# engine timed out (502). The cause is outside the gateway: the whole VM stalls for 6-8 s (a
# separate process sleeping in 50 ms steps woke 6.4-7.8 s late at the same moments, and never in
# 90 s of the burner alone), so the gateway's 5 s connect timers have expired when it runs again.
@pytest.mark.flaky(reruns=1)
def test_a_heavy_agent_does_not_starve_the_others(vllm_engine: EngineProcess) -> None:
    """Four long requests fill the budget; one session queues 12 requests, then 12 sessions
    queue 1 each; then the long ones are cancelled (their clients leave). FIFO would admit the
    12 newcomers 13th to 24th; fair queueing admits them right after the heavy session's first,
    before the rest of its backlog."""
    blocker_cost = cost_of(QUESTION, 1900)
    config = make_config(
        [vllm_engine.url], budget_tokens=4 * blocker_cost, tokenizer_path=str(tiny_model_dir())
    )

    async def scenario(url: str, gateway: Gateway) -> None:
        admission = gateway.admission

        blockers: list[asyncio.Task[None]] = []

        def state() -> object:
            ended = [repr(b.exception())[:300] for b in blockers if b.done()]
            return (
                admission.num_admitted,
                len(admission.queue),
                gateway.replicas[0].reserved_tokens,
                ended,
            )

        async with client(url) as api:
            with vllm_engine.paused():  # the blockers cannot finish before they are cancelled
                blockers += [asyncio.create_task(ask(api, f"blocker-{i}", 1900)) for i in range(4)]
                await until(lambda: admission.num_admitted == 4, state)
                heavy = [asyncio.create_task(ask(api, "heavy", 32)) for _ in range(12)]
                await until(lambda: len(admission.queue) == 12, state)
                light = [asyncio.create_task(ask(api, f"light-{i}", 32)) for i in range(12)]
                await until(lambda: len(admission.queue) == 24, state)
                assert admission.num_admitted == 4  # everything queued behind the blockers
                for blocker in blockers:
                    blocker.cancel()
                await until(lambda: admission.num_admitted > 4, state)  # the queue moves
            await asyncio.gather(*heavy, *light)

    with running_gateway(config) as gw:
        asyncio.run(scenario(gw.url, gw.gateway))
        after_blockers = list(gw.gateway.admission.admitted_flows)[4:]
    # `user` is the end user's label (no session): the fair queue's flow, within the tenant
    lights = {f"user:open/light-{i}" for i in range(12)}
    assert after_blockers[0] == "user:open/heavy"
    assert set(after_blockers[1:13]) == lights
    assert after_blockers[13:] == ["user:open/heavy"] * 11


def test_overload_past_the_queue_gets_429_with_retry_after_and_no_5xx(
    vllm_engine: EngineProcess,
) -> None:
    cost = cost_of(QUESTION, 300)
    config = make_config(
        [vllm_engine.url], budget_tokens=cost, max_queue=2, tokenizer_path=str(tiny_model_dir())
    )
    body = {"model": SERVED_MODEL_NAME, "messages": QUESTION, "max_tokens": 64, "ignore_eos": True}

    async def scenario(url: str, gateway: Gateway) -> tuple[list[httpx.Response], list[object]]:
        async with client(url) as api, httpx.AsyncClient(timeout=120) as http:
            with vllm_engine.paused():  # the blocker holds the whole budget until resumed
                blocker = asyncio.create_task(ask(api, "blocker", 300))
                await until(
                    lambda: gateway.admission.num_admitted == 1, lambda: gateway.replicas[0].load
                )
                posts = [
                    asyncio.create_task(http.post(f"{url}/v1/chat/completions", json=body))
                    for _ in range(10)
                ]
                await until(
                    lambda: sum(p.done() for p in posts) == 8,  # refused at once, not queued
                    lambda: (len(gateway.admission.queue), [p.done() for p in posts]),
                )
                assert len(gateway.admission.queue) == 2
            responses = await asyncio.gather(*posts)
            through_openai = [
                api.chat.completions.create(
                    model=SERVED_MODEL_NAME, messages=QUESTION, max_tokens=64
                )
                for _ in range(3)
            ]
            outcomes = await asyncio.gather(*through_openai, return_exceptions=True)
            await blocker
        return responses, outcomes

    with running_gateway(config) as gw:
        responses, outcomes = asyncio.run(scenario(gw.url, gw.gateway))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 2 + [429] * 8  # 2 queued behind the blocker, the rest refused
    refused = [r for r in responses if r.status_code == 429]
    assert all(int(r.headers["retry-after"]) >= 1 for r in refused)
    assert refused[0].json()["error"]["type"] == "rate_limit_exceeded"
    assert not [o for o in outcomes if isinstance(o, openai.InternalServerError)]  # never a 5xx
    assert all(isinstance(o, openai.RateLimitError) or hasattr(o, "choices") for o in outcomes)


def test_over_long_prompt_is_refused_with_400_before_the_engine(vllm_engine: EngineProcess) -> None:
    config = make_config([vllm_engine.url], tokenizer_path=str(tiny_model_dir()))
    long_text = " ".join(f"word{i}" for i in range(3000))  # > 2048 tokens in any BPE

    async def scenario(url: str) -> None:
        async with client(url) as api:
            with pytest.raises(openai.BadRequestError) as refused:
                await api.chat.completions.create(
                    model=SERVED_MODEL_NAME,
                    messages=[{"role": "user", "content": long_text}],
                    max_tokens=4,
                )
        assert "max_model_len is 2048" in str(refused.value)

    with running_gateway(config) as gw:
        asyncio.run(scenario(gw.url))
        assert gw.gateway.admission.num_admitted == 0  # never reached the engine


def test_client_disconnect_frees_the_budget_and_the_engine(vllm_engine: EngineProcess) -> None:
    cost = cost_of(QUESTION, 1500)
    config = make_config(
        [vllm_engine.url], budget_tokens=cost, tokenizer_path=str(tiny_model_dir())
    )
    body = {
        "model": SERVED_MODEL_NAME,
        "messages": QUESTION,
        "max_tokens": 1500,
        "ignore_eos": True,
    }

    with running_gateway(config) as gw:
        replica = gw.gateway.replicas[0]
        url = f"{gw.url}/v1/chat/completions"
        generated_before = engine_gauge(vllm_engine, "vllm:generation_tokens_total")
        with vllm_engine.paused() as frozen:  # a few tokens at a time: 1500 cannot finish
            has_token = threading.Event()
            stepper = threading.Thread(target=frozen.step_until, args=(has_token.is_set,))
            stepper.start()
            with httpx.stream("POST", url, json={**body, "stream": True}, timeout=60) as stream:
                lines = stream.iter_lines()
                first = next(line for line in lines if '"content"' in line)
                has_token.set()
                stepper.join()
                assert replica.reserved_tokens == cost, (
                    f"longest engine step {frozen.longest_step_s:.3f} s",
                    first,
                    engine_gauge(vllm_engine, "vllm:generation_tokens_total") - generated_before,
                    gw.gateway.metrics.registry.render(),
                    list(lines)[-3:],
                )
            # the client is gone after a few tokens of 1500
            deadline = time.monotonic() + 10
            while replica.reserved_tokens and time.monotonic() < deadline:
                time.sleep(0.05)
            assert replica.reserved_tokens == 0
        deadline = time.monotonic() + 10
        while engine_gauge(vllm_engine, "vllm:num_requests_running") and (
            time.monotonic() < deadline
        ):
            time.sleep(0.05)
        assert engine_gauge(vllm_engine, "vllm:num_requests_running") == 0
        generated = engine_gauge(vllm_engine, "vllm:generation_tokens_total") - generated_before
        assert generated < 1500  # vLLM aborted it rather than finishing it
        # a non-streaming request whose client times out frees the budget too (the engine is
        # frozen so that 1500 tokens cannot come back within the client's 1 s)
        with vllm_engine.paused():
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(f"{gw.url}/v1/chat/completions", json=body, timeout=1.0)
            deadline = time.monotonic() + 10
            while replica.reserved_tokens and time.monotonic() < deadline:
                time.sleep(0.05)
            assert replica.reserved_tokens == 0
        assert gw.gateway.metrics.disconnects.get() == 2
