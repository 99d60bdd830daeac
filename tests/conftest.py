"""Session-wide real servers (see tests/engine_fixture.py): started on first use, killed by PID."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine_fixture import EngineProcess, RedisProcess


@pytest.fixture(scope="session")
def vllm_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    """One real vLLM CPU engine serving the tiny Qwen2 for the whole test run."""
    engine = EngineProcess(log_path=tmp_path_factory.mktemp("engine") / "vllm.log")
    try:
        yield engine.start()
    finally:
        engine.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    server = RedisProcess(log_path=tmp_path_factory.mktemp("redis") / "redis.log")
    try:
        yield server.start()
    finally:
        server.stop()
