"""Shared test fixtures.

`fidelity_report` collects accuracy figures measured by tests (planner KV tokens, simulator
errors) and prints them at the end of the run, so every run shows the numbers behind the bars.
The real servers (see tests/engine_fixture.py) are session-wide: started on first use, killed
by PID.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine_fixture import EngineProcess, RedisProcess

# Tests never reach the Hugging Face hub (huggingface_hub comes with `tokenizers`): offline, a
# typo'd hub id would otherwise spend seconds in the hub client's retries.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

_REPORT: list[str] = []


@pytest.fixture(autouse=True)
def _no_user_calibration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A developer's own `kvwise calibrate` results must not change what the tests see."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))


@pytest.fixture(autouse=True)
def _no_user_hf_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nor may the models in a developer's Hugging Face cache: kvwise reads it before the
    catalog. Tests that need a cache build one and point HF_HUB_CACHE at it."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))


@pytest.fixture(autouse=True, scope="module")
def _collect_garbage_per_module() -> Iterator[None]:
    """A socket or file a module leaves unclosed warns when the garbage collector finds it, and
    warnings fail the tests: collecting after each module blames the module that leaked, not
    whichever later test happens to trigger a full collection."""
    yield
    gc.collect()


@pytest.fixture
def fidelity_report() -> Iterator[list[str]]:
    lines: list[str] = []
    yield lines
    _REPORT.extend(lines)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _REPORT:
        terminalreporter.section("kvwise fidelity figures")
        for line in _REPORT:
            terminalreporter.write_line(line)


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
