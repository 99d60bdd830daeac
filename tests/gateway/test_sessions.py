from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kvwise.gateway.sessions import (
    SessionCaps,
    SessionStore,
    SqliteStore,
    open_store,
    units_to_drop,
)
from tests.engine_fixture import RedisProcess

pytestmark = pytest.mark.anyio

CAPS = SessionCaps(ttl_s=3600, max_messages=6, max_bytes=2**20)
SYSTEM = [{"role": "system", "content": "sys"}]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def turn(i: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"u{i}"}, {"role": "assistant", "content": f"a{i}"}]


async def exercise(store: SessionStore) -> None:
    await store.append_turn("s1", SYSTEM, turn(0))
    await store.append_turn("s1", None, turn(1))  # None keeps the stored system prompt
    history = await store.load("s1")
    assert history.system == SYSTEM
    assert [m["content"] for m in history.messages] == ["u0", "a0", "u1", "a1"]
    for i in range(2, 5):
        await store.append_turn("s1", None, turn(i))
    capped = await store.load("s1")
    assert [m["content"] for m in capped.messages] == ["u2", "a2", "u3", "a3", "u4", "a4"]  # max 6
    await store.append_turn("s2", None, turn(0) + turn(1))
    await store.append_turn("s2", None, turn(7), num_kept=1)  # the client rewound to u0
    assert [m["content"] for m in (await store.load("s2")).messages] == ["u0", "u7", "a7"]
    await store.append_turn("s2", None, turn(8), num_kept=0)  # ... or edited its first message
    assert [m["content"] for m in (await store.load("s2")).messages] == ["u8", "a8"]
    assert (await store.load("nobody")).messages == []
    assert await store.count_sessions() == 2


async def test_sqlite_store_keeps_turns_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SqliteStore(path, CAPS)
    await exercise(store)
    await store.close()
    reopened = open_store(str(path), CAPS)
    assert [m["content"] for m in (await reopened.load("s1")).messages][-1] == "a4"
    await reopened.close()


async def test_sqlite_store_forgets_idle_sessions(tmp_path: Path) -> None:
    store = SqliteStore(
        tmp_path / "s.sqlite3", SessionCaps(ttl_s=0.05, max_messages=10, max_bytes=2**20)
    )
    await store.append_turn("s1", SYSTEM, turn(0))
    time.sleep(0.1)
    assert await store.count_sessions() == 0
    assert (await store.load("s1")).messages == []
    await store.close()


@pytest.mark.redis
async def test_redis_store_behaves_the_same(redis_server: RedisProcess) -> None:
    store = open_store(redis_server.url, CAPS)
    await exercise(store)
    await store.close()


def test_caps_drop_whole_units_oldest_first() -> None:
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]}
    result = {"role": "tool", "content": "r", "tool_call_id": "1"}
    messages = [
        {"role": "user", "content": "u"},
        call,
        result,
        result,
        {"role": "assistant", "content": "a"},
    ]
    caps = SessionCaps(ttl_s=1, max_messages=2, max_bytes=2**20)
    assert units_to_drop(messages, caps) == 4  # the user message, then the call with both results
