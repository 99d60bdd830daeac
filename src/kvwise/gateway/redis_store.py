"""Session histories in Redis, shared by several gateway instances.

Keys (all with the session TTL, refreshed on every turn):
    kvwise:session:{id}:messages   list of JSON messages, oldest first
    kvwise:session:{id}:system     JSON list of the system messages
    kvwise:sessions                sorted set: session id -> last update (unix s), for counting

A turn is one MULTI/EXEC transaction, so another instance sees all of it or none. Redis persists
as its own configuration says, and `durability_problem` reads that configuration at start: only
`appendonly yes` with `appendfsync always` keeps every acknowledged turn through a crash of the
machine, as SQLite with `synchronous=FULL` does. With `appendfsync everysec` (Redis's default
once AOF is on) a power loss can take the last second of turns; without AOF, RDB snapshots
lose everything since the last one (redis.io, "Redis persistence").
"""

from __future__ import annotations

import json
import time
from typing import Any

from kvwise.gateway.history import Message
from kvwise.gateway.sessions import SessionCaps, SessionHistory, units_to_drop

_PREFIX = "kvwise:session:"
_INDEX = "kvwise:sessions"


def durability_problem(url: str, timeout_s: float = 5.0) -> str | None:
    """One line saying how acknowledged turns can be lost with this Redis, or None."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=timeout_s, decode_responses=True)
    try:
        config = {**client.config_get("appendonly"), **client.config_get("appendfsync")}
    except redis.ResponseError as exc:  # CONFIG renamed or refused (managed services)
        return f"cannot read its persistence settings ({exc}): acknowledged turns may be lost"
    except redis.RedisError as exc:
        return f"not answering ({type(exc).__name__}): cannot check its persistence"
    finally:
        client.close()
    if config.get("appendonly") != "yes":
        return (
            "appendonly is off: a Redis crash loses every turn since its last RDB snapshot "
            "(set appendonly yes, appendfsync always)"
        )
    if config.get("appendfsync") != "always":
        return (
            f"appendfsync is {config.get('appendfsync')}: a machine crash can lose the last "
            "second of acknowledged turns (set appendfsync always)"
        )
    return None


class RedisStore:
    def __init__(self, url: str, caps: SessionCaps) -> None:
        import redis.asyncio as redis_asyncio

        self.caps = caps
        self._redis: Any = redis_asyncio.from_url(url, decode_responses=True)

    async def load(self, session_id: str) -> SessionHistory:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.get(f"{_PREFIX}{session_id}:system")
            pipe.lrange(f"{_PREFIX}{session_id}:messages", 0, -1)
            system_json, bodies = await pipe.execute()
        system = json.loads(system_json) if system_json else []
        return SessionHistory(system, [json.loads(b) for b in bodies])

    async def append_turn(
        self,
        session_id: str,
        system: list[Message] | None,
        messages: list[Message],
        num_kept: int | None = None,
    ) -> None:
        ttl_ms = int(self.caps.ttl_s * 1000)
        messages_key, system_key = (
            f"{_PREFIX}{session_id}:messages",
            f"{_PREFIX}{session_id}:system",
        )
        async with self._redis.pipeline(transaction=True) as pipe:
            if system is not None:
                pipe.set(system_key, json.dumps(system), px=ttl_ms)
            else:
                pipe.pexpire(system_key, ttl_ms)
            if num_kept == 0:
                pipe.delete(messages_key)
            elif num_kept is not None:
                pipe.ltrim(messages_key, 0, num_kept - 1)
            if messages:
                pipe.rpush(messages_key, *[json.dumps(m) for m in messages])
            pipe.pexpire(messages_key, ttl_ms)
            pipe.zadd(_INDEX, {session_id: time.time()})
            await pipe.execute()
        if messages:
            await self._enforce_caps(messages_key)

    async def _enforce_caps(self, messages_key: str) -> None:
        bodies = await self._redis.lrange(messages_key, 0, -1)
        if len(bodies) <= self.caps.max_messages and sum(map(len, bodies)) <= self.caps.max_bytes:
            return
        drop = units_to_drop([json.loads(b) for b in bodies], self.caps)
        if drop:
            await self._redis.ltrim(messages_key, drop, -1)  # appends only go to the tail

    async def count_sessions(self) -> int:
        cutoff_s = time.time() - self.caps.ttl_s
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.zremrangebyscore(_INDEX, "-inf", cutoff_s)
            pipe.zcard(_INDEX)
            _, count = await pipe.execute()
        return int(count)

    async def close(self) -> None:
        await self._redis.aclose()
