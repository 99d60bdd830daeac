"""Session-wide real servers (see tests/engine_fixture.py): started on first use, killed by PID."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine_fixture import EngineProcess, RedisProcess


@pytest.fixture(scope="session")
def vllm_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    """One real vLLM CPU engine serving the tiny Qwen2 for the whole test run.

    KVWISE_TEST_ENGINE_PORT reuses an engine already serving the tiny model on that loopback
    port (faster iterations while developing); it is left running."""
    reuse_port = os.environ.get("KVWISE_TEST_ENGINE_PORT")
    if reuse_port:
        yield EngineProcess(log_path=Path(os.devnull), port=int(reuse_port))
        return
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
