"""Agent sessions through the real engine: the client sends only its new turn; the gateway keeps
the conversation, trims it to the budget, survives a restart (SQLite) and is shared by two
gateway instances (Redis)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from kvwise.gateway.sessions import SessionCaps, SqliteStore
from tests.engine_fixture import SERVED_MODEL_NAME, EngineProcess, RedisProcess, tiny_model_dir
from tests.fake_upstream import Behaviour
from tests.gateway.servers import fake_upstreams, make_config, running_gateway, session_config

pytestmark = pytest.mark.engine

SYSTEM = {"role": "system", "content": "You are a coding agent. Keep answers short."}


async def turn(
    url: str, session_id: str, messages: list[dict[str, Any]]
) -> tuple[dict[str, str], int]:
    """One turn through the openai client; the gateway's history headers and the prompt size."""
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as api:
        raw = await api.chat.completions.with_raw_response.create(
            model=SERVED_MODEL_NAME, messages=messages, max_tokens=12,
            extra_headers={"X-Session-Id": session_id}, extra_body={"ignore_eos": True},
        )  # fmt: skip
    reply = raw.parse()
    assert reply.usage is not None
    headers = {k: v for k, v in raw.headers.items() if k.startswith("x-kvwise-history")}
    return headers, reply.usage.prompt_tokens


def user(i: int) -> dict[str, str]:
    return {
        "role": "user",
        "content": f"Step {i}: list the files, then read README.md and summarise it.",
    }


def test_history_is_rebuilt_trimmed_and_survives_a_restart(
    vllm_engine: EngineProcess, tmp_path: Path
) -> None:
    store = str(tmp_path / "sessions.sqlite3")
    sessions = session_config(store, max_prompt_tokens=150)
    config = make_config([vllm_engine.url], sessions=sessions, tokenizer_path=str(tiny_model_dir()))
    seen: list[tuple[dict[str, str], int]] = []
    with running_gateway(config) as gw:
        seen.append(asyncio.run(turn(gw.url, "agent-1", [SYSTEM, user(0)])))
        for i in range(1, 6):
            seen.append(asyncio.run(turn(gw.url, "agent-1", [user(i)])))  # only the new turn
    # turn 2 carried turn 1 (system, user, assistant, user): history was rebuilt
    assert seen[1][0]["x-kvwise-history-messages"] == "4"
    assert seen[1][1] > seen[0][1]
    # by the last turns the 150-token budget forces the oldest turns out
    assert int(seen[-1][0]["x-kvwise-history-dropped-messages"]) >= 2
    assert int(seen[-1][0]["x-kvwise-history-dropped-tokens"]) > 0
    assert all(prompt_tokens <= 150 for _, prompt_tokens in seen)

    with running_gateway(config) as gw:  # a new gateway process-state on the same file
        headers, _ = asyncio.run(turn(gw.url, "agent-1", [user(6)]))
    assert int(headers["x-kvwise-history-messages"]) > 2  # it remembered the conversation

    async def stored() -> list[dict[str, Any]]:
        db = SqliteStore(Path(store), SessionCaps(3600, 1000, 2**20))
        history = await db.load("open/agent-1")  # the session of the open tenant (no keys)
        await db.close()
        assert history.system == [SYSTEM]
        return history.messages

    messages = asyncio.run(stored())
    assert [m["role"] for m in messages] == ["user", "assistant"] * 7  # every acknowledged turn
    assert [m["content"] for m in messages[::2]] == [user(i)["content"] for i in range(7)]


@pytest.mark.redis
def test_two_gateways_share_sessions_through_redis(
    vllm_engine: EngineProcess, redis_server: RedisProcess
) -> None:
    sessions = session_config(redis_server.url)
    config = make_config([vllm_engine.url], sessions=sessions, tokenizer_path=str(tiny_model_dir()))
    with running_gateway(config) as first, running_gateway(config) as second:
        asyncio.run(turn(first.url, "shared-agent", [SYSTEM, user(0)]))
        headers, _ = asyncio.run(turn(second.url, "shared-agent", [user(1)]))
        assert headers["x-kvwise-history-messages"] == "4"  # system, user 0, reply 0, user 1
        headers, _ = asyncio.run(turn(first.url, "shared-agent", [user(2)]))
        assert headers["x-kvwise-history-messages"] == "6"


@pytest.mark.redis
def test_a_redis_outage_is_a_503_and_never_an_unstored_turn_acknowledged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis stops mid-session (its own server, not the shared one). The upstream is a fake
    (failure injection at an exact point, not an engine's behaviour): a stream is running when
    Redis goes, so its turn cannot be stored and it must end with an error, not [DONE]."""
    redis = RedisProcess(log_path=tmp_path / "redis.log").start()
    try:
        with fake_upstreams(Behaviour(itl_s=0.05)) as ups:
            config = make_config([ups[0][0]], sessions=session_config(redis.url))
            with running_gateway(config) as gw:
                url = f"{gw.url}/v1/chat/completions"
                body = {"model": "fake", "messages": [user(0)], "max_tokens": 4}
                session = {"x-session-id": "a"}
                assert httpx.post(url, json=body, headers=session).status_code == 200  # turn 1
                stream_body = {**body, "stream": True}
                with httpx.stream("POST", url, json=stream_body, headers=session) as stream:
                    lines = stream.iter_lines()
                    assert next(line for line in lines if '"content"' in line)
                    redis.stop()  # while the reply streams
                    rest = list(lines)
                assert "session store unavailable" in "".join(rest)
                assert "data: [DONE]" not in rest
                refused = httpx.post(url, json=body, headers=session)  # history unreadable
                assert refused.status_code == 503, refused.text
                assert "session store unavailable" in refused.json()["error"]["message"]
                stateless = httpx.post(url, json=body)  # no session: served
                assert stateless.status_code == 200
                time.sleep(1.0)  # five health ticks with the store down: one warning
                store_warnings = [r for r in caplog.records if "not answering" in r.message]
                assert len(store_warnings) == 1
    finally:
        redis.stop()
