"""Agent session histories: the store interface, its SQLite implementation, and the caps.

A session is a system prompt (the latest one the client sent) and the list of other messages,
oldest first. A turn (the client's new messages plus the assistant's reply) is written in one
transaction after the reply is complete and before it is acknowledged to the client, so a
restart never loses an acknowledged turn and never keeps half of one.

SQLite runs in WAL mode with `synchronous=FULL` (each commit is on disk before it returns) on a
single worker thread, so the event loop never blocks on the disk. `open_store` picks SQLite for a
path and Redis (`kvwise.gateway.redis_store`) for a `redis://` URL.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kvwise.gateway.asgi import HttpError
from kvwise.gateway.history import Message, split_units


def store_unavailable(what: str) -> HttpError:
    """The answer when the session store (Redis down, SQLite disk full) fails a request."""
    return HttpError(503, f"session store unavailable: {what}", "service_unavailable")


@dataclass(frozen=True)
class SessionCaps:
    ttl_s: float  # a session untouched this long is forgotten
    max_messages: int  # per session; the oldest units go first beyond it
    max_bytes: int  # per session, JSON bytes of its messages


@dataclass(frozen=True)
class SessionHistory:
    system: list[Message]
    messages: list[Message]


class SessionStore(Protocol):
    async def load(self, session_id: str) -> SessionHistory: ...

    async def append_turn(
        self,
        session_id: str,
        system: list[Message] | None,
        messages: list[Message],
        num_kept: int | None = None,
    ) -> None:
        """Append a turn; with `num_kept`, first forget the stored messages past the first
        `num_kept` (the client rewound or edited the conversation), in the same transaction."""

    async def count_sessions(self) -> int: ...

    async def close(self) -> None: ...


def units_to_drop(messages: list[Message], caps: SessionCaps) -> int:
    """How many of the oldest messages to forget so the rest fit the caps, whole units only."""
    sizes = [len(json.dumps(m)) for m in messages]
    num_messages, num_bytes = len(messages), sum(sizes)
    drop = 0
    for unit in split_units(messages):
        if num_messages <= caps.max_messages and num_bytes <= caps.max_bytes:
            break
        unit_bytes = sum(sizes[drop : drop + len(unit)])
        num_messages -= len(unit)
        num_bytes -= unit_bytes
        drop += len(unit)
    return drop


_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    system_json TEXT NOT NULL,
    updated_s REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body_json TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"""


class SqliteStore:
    def __init__(self, path: Path, caps: SessionCaps) -> None:
        self.caps = caps
        path.parent.mkdir(parents=True, exist_ok=True)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvwise-sqlite")
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def load(self, session_id: str) -> SessionHistory:
        history: SessionHistory = await self._run(self._load, session_id)
        return history

    def _load(self, session_id: str) -> SessionHistory:
        row = self._db.execute(
            "SELECT system_json, updated_s FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None:
            return SessionHistory([], [])
        if row[1] < time.time() - self.caps.ttl_s:
            self._delete(session_id)
            return SessionHistory([], [])
        bodies = self._db.execute(
            "SELECT body_json FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
        return SessionHistory(json.loads(row[0]), [json.loads(b[0]) for b in bodies])

    async def append_turn(
        self,
        session_id: str,
        system: list[Message] | None,
        messages: list[Message],
        num_kept: int | None = None,
    ) -> None:
        await self._run(self._append_turn, session_id, system, messages, num_kept)

    def _append_turn(
        self,
        session_id: str,
        system: list[Message] | None,
        messages: list[Message],
        num_kept: int | None,
    ) -> None:
        now_s = time.time()
        with self._transaction():
            if num_kept is not None:
                self._db.execute(
                    "DELETE FROM messages WHERE session_id = ? AND seq NOT IN (SELECT seq FROM "
                    "messages WHERE session_id = ? ORDER BY seq LIMIT ?)",
                    (session_id, session_id, num_kept),
                )
            last_seq = "COALESCE((SELECT MAX(seq) FROM messages WHERE session_id = ?), -1)"
            row = self._db.execute(
                f"SELECT system_json, {last_seq} FROM sessions WHERE session_id = ?",
                (session_id, session_id),
            ).fetchone()
            system_json = json.dumps(system) if system is not None else (row[0] if row else "[]")
            next_seq = (row[1] + 1) if row else 0
            self._db.execute(
                "INSERT INTO sessions (session_id, system_json, updated_s) VALUES (?, ?, ?) "
                "ON CONFLICT(session_id) DO UPDATE SET system_json = excluded.system_json, "
                "updated_s = excluded.updated_s",
                (session_id, system_json, now_s),
            )
            self._db.executemany(
                "INSERT INTO messages (session_id, seq, body_json) VALUES (?, ?, ?)",
                [(session_id, next_seq + i, json.dumps(m)) for i, m in enumerate(messages)],
            )
            self._enforce_caps(session_id)

    def _enforce_caps(self, session_id: str) -> None:
        rows = self._db.execute(
            "SELECT seq, body_json FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
        drop = units_to_drop([json.loads(r[1]) for r in rows], self.caps)
        if drop:
            self._db.execute(
                "DELETE FROM messages WHERE session_id = ? AND seq <= ?",
                (session_id, rows[drop - 1][0]),
            )

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")  # the connection is in autocommit mode otherwise
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _delete(self, session_id: str) -> None:
        with self._transaction():
            self._db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
            self._db.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))

    async def count_sessions(self) -> int:
        count: int = await self._run(self._count_sessions)
        return count

    def _count_sessions(self) -> int:
        """Live sessions; expired ones are purged on the way (this runs every health tick)."""
        cutoff_s = time.time() - self.caps.ttl_s
        expired = self._db.execute(
            "SELECT 1 FROM sessions WHERE updated_s < ? LIMIT 1", (cutoff_s,)
        )
        if expired.fetchone() is not None:  # write (and fsync) only when there is work
            with self._transaction():
                self._db.execute(
                    "DELETE FROM messages WHERE session_id IN "
                    "(SELECT session_id FROM sessions WHERE updated_s < ?)",
                    (cutoff_s,),
                )
                self._db.execute("DELETE FROM sessions WHERE updated_s < ?", (cutoff_s,))
        return int(self._db.execute("SELECT COUNT(*) FROM sessions").fetchone()[0])

    async def close(self) -> None:
        await self._run(self._db.close)
        self._executor.shutdown(wait=True)


def open_store(location: str, caps: SessionCaps) -> SessionStore:
    """`redis://...` or `rediss://...` for Redis, anything else is a SQLite file path."""
    if location.startswith(("redis://", "rediss://", "unix://")):
        from kvwise.gateway.redis_store import RedisStore

        return RedisStore(location, caps)
    return SqliteStore(Path(location).expanduser(), caps)
