"""A real vLLM CPU engine found by DNS, then drained mid-stream, through the real `openai` client.

The name is served by a real nameserver on loopback (dnslib, UDP); the engine is the session's
tiny-Qwen2 CPU engine (tests/conftest.py).
"""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from kvwise.gateway.config import SecurityConfig
from kvwise.gateway.membership import MembershipConfig
from kvwise.gateway.replica_dns import DnsTarget
from tests.engine_fixture import SERVED_MODEL_NAME, EngineProcess
from tests.gateway.dns_server import dns_server
from tests.gateway.servers import make_config, running_gateway, wait_until

pytestmark = pytest.mark.engine

NAME = "vllm-headless.default.svc.cluster.local"
ADMIN = {"authorization": "Bearer admin-key"}
LONG = 1000  # tokens: a stream that outlasts the gateway's next DNS tick (0.2 s)
QUESTION = [{"role": "user", "content": "Count to one hundred."}]


def _states(url: str) -> dict[str, str]:
    rows = httpx.get(f"{url}/kvwise/replicas", headers=ADMIN).json()["replicas"]
    return {row["url"]: row["state"] for row in rows}


def _state(gateway_url: str) -> str:
    """The one replica's state, "" once there is none."""
    return next(iter(_states(gateway_url).values()), "")


def test_an_engine_joins_from_dns_and_a_drained_one_finishes_its_stream(
    vllm_engine: EngineProcess,
) -> None:
    with dns_server() as (records, dns_port):
        target = DnsTarget(NAME, vllm_engine.port, "127.0.0.1", dns_port)
        config = make_config(
            [], security=SecurityConfig(admin_keys=("admin-key",)),
            membership=MembershipConfig(100_000, None, target, dns_interval_s=0.2),
        )  # fmt: skip
        with running_gateway(config) as gw:

            def client() -> openai.AsyncOpenAI:  # one per asyncio.run: its connections die with it
                return openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0)

            async def ask(max_tokens: int) -> int:
                async with client() as api:
                    reply = await api.chat.completions.create(
                        model=SERVED_MODEL_NAME, messages=QUESTION, max_tokens=max_tokens,  # type: ignore[arg-type]
                        extra_body={"ignore_eos": True},
                    )  # fmt: skip
                assert reply.usage is not None
                return reply.usage.completion_tokens

            async def drained_mid_stream() -> tuple[int, str]:
                tokens, state_seen = 0, ""
                async with client() as api:
                    stream = await api.chat.completions.create(
                        model=SERVED_MODEL_NAME, messages=QUESTION, max_tokens=LONG, stream=True,  # type: ignore[arg-type]
                        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
                    )  # fmt: skip
                    async for chunk in stream:
                        if tokens == 0 and chunk.choices:
                            records.set(NAME, [])  # the pod goes away as its first token comes
                            # (this client reads nothing meanwhile: the rest waits, in flight)
                            if wait_until(lambda: _state(gw.url) == "draining", 10):
                                state_seen = "draining"
                        if chunk.usage is not None:
                            tokens = chunk.usage.completion_tokens
                        elif chunk.choices:
                            tokens = max(tokens, 1)
                return tokens, state_seen

            with pytest.raises(openai.APIStatusError) as nothing_yet:
                asyncio.run(ask(4))
            assert nothing_yet.value.status_code == 503
            records.set(NAME, ["127.0.0.1"])
            assert wait_until(lambda: _states(gw.url) == {vllm_engine.url: "serving"}, 30)
            assert asyncio.run(ask(8)) == 8
            tokens, state_seen = asyncio.run(drained_mid_stream())
            assert state_seen == "draining"  # the gateway took it out while the stream ran
            assert tokens == LONG  # and the stream still got every token
            assert wait_until(lambda: _states(gw.url) == {}, 10)  # removed once it finished
            assert httpx.get(f"{gw.url}/health").status_code == 503
