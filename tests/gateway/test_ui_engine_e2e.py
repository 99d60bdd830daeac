"""/kvwise/status and `kvwise top` in front of the REAL vLLM CPU engine: the figures come from
the engine's own /metrics (its pool, its TTFT histogram, its token counters), under load."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from kvwise.cli import main
from tests.engine_fixture import SERVED_MODEL_NAME, EngineProcess, tiny_model_dir
from tests.gateway.servers import make_config, running_gateway

pytestmark = pytest.mark.engine


def _engine_pool_tokens(engine: EngineProcess) -> int:
    for line in httpx.get(f"{engine.url}/metrics").text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(
                part.split("=", 1)
                for part in line[line.index("{") + 1 : line.index("}")].split(",")
            )
            return int(labels["num_gpu_blocks"].strip('"')) * int(labels["block_size"].strip('"'))
    raise AssertionError("no vllm:cache_config_info in the engine's /metrics")


def test_status_and_top_show_the_engines_figures(
    vllm_engine: EngineProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    pool_tokens = _engine_pool_tokens(vllm_engine)
    config = make_config(
        [vllm_engine.url], budget_tokens=pool_tokens, tokenizer_path=str(tiny_model_dir())
    )
    with running_gateway(config) as gw:
        httpx.get(f"{gw.url}/kvwise/status")  # the start of the window
        window_start = time.monotonic()

        def one() -> None:
            body = {"model": SERVED_MODEL_NAME, "prompt": "hello " * 20, "max_tokens": 64,
                    "ignore_eos": True, "stream": True}  # fmt: skip
            assert httpx.post(f"{gw.url}/v1/completions", json=body, timeout=120).status_code == 200

        threads = [threading.Thread(target=one) for _ in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # the gateway scrapes the engine at most once a second: the window needs a second scrape
        time.sleep(max(0.0, 1.2 - (time.monotonic() - window_start)))
        assert main(["top", gw.url, "--once", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    (replica,) = status["replicas"]
    assert replica["kv_pool_tokens"] == pool_tokens == replica["planned_pool_tokens"]
    assert replica["ttft_p50_ms"] is not None and replica["ttft_p50_ms"] > 0  # the engine's own
    assert replica["tokens_per_s"] is not None and replica["tokens_per_s"] > 0
    assert status["gateway"]["num_admitted"] == 12
    assert status["departures"] == []  # the pool is the plan's, nothing preempted
