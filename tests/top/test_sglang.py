"""`kvwise top` against SGLang: its /metrics names read, the engine told from them (or given with
--engine), retractions shown where vLLM shows preemptions.

SGLang has no CPU build (its PyPI wheel is CUDA-only), so no SGLang server runs here: a stand-in
process (`fake_sglang.py`) serves /metrics as SGLang 0.5.23 does, its series declared as SGLang
declares them and rendered by prometheus_client in multiprocess mode as SGLang renders them (the
sources are in its docstring); a second page is SGLang's own published example
(tests/gateway/data/sglang_docs_metrics_sample.txt). Reading a real SGLang is the GPU-only step.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

from kvwise.cli import main
from kvwise.top.render import view
from kvwise.top.sources import detect, poll
from tests.engine_fixture import free_port
from tests.gateway.servers import make_config, running_gateway
from tests.top.metered import engine_text, metered_upstream

FAKE = Path(__file__).with_name("fake_sglang.py")
DOCS_SAMPLE = (
    Path(__file__).parents[1] / "gateway" / "data" / "sglang_docs_metrics_sample.txt"
).read_text()
POOL = 92_471  # what the SGLang planner gives Qwen2.5-7B on an RTX 4090 (`plan --engine sglang`)


class FakeSglang:
    def __init__(self, url: str) -> None:
        self.url = url

    def set(self, **figures: Any) -> None:
        httpx.post(f"{self.url}/fake/set", json=figures, timeout=5).raise_for_status()


@contextmanager
def fake_sglang(enable_metrics: bool = True) -> Iterator[FakeSglang]:
    port = free_port()
    argv = [sys.executable, str(FAKE), str(port), *(["--enable-metrics"] if enable_metrics else [])]
    process = subprocess.Popen(argv)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.HTTPError:
                assert process.poll() is None and time.monotonic() < deadline, "no fake SGLang"
                time.sleep(0.1)
        yield FakeSglang(url)
    finally:
        process.terminate()
        process.wait(10)


BUSY = {"num_used_tokens": 23_000, "max_total_num_tokens": POOL, "token_usage": 0.25,
        "num_running_reqs": 5, "num_queue_reqs": 2}  # fmt: skip


def _once(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["top", *args, "--once", "--json", "--interval", "0.2"]) == 0
    return json.loads(capsys.readouterr().out)


def test_top_tells_sglang_from_its_metrics_and_reads_its_pool(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with fake_sglang() as server:
        server.set(gauges=BUSY)
        status = _once(capsys, server.url, "--planned-kv-tokens", str(POOL))
        assert _once(capsys, server.url, "--engine", "sglang")["replicas"][0]["engine"] == "sglang"
        assert main(["top", server.url, "--once"]) == 0
        text = capsys.readouterr().out
    (replica,) = status["replicas"]
    assert replica["engine"] == "sglang"
    # SGLang counts KV per token: the used figure is its own, not a rounded share of the pool
    assert (replica["kv_used_tokens"], replica["kv_pool_tokens"]) == (23_000, POOL)
    assert replica["kv_usage_pct"] == round(23_000 / POOL * 100, 1)
    assert (replica["num_requests_running"], replica["num_requests_waiting"]) == (5, 2)
    assert status["departures"] == []  # the pool is the planned one, nothing retracted
    assert "SGLang" in text and "23,000 / 92,471" in text and "retractions/min" in text


def test_retractions_and_latencies_over_the_window() -> None:
    with fake_sglang() as server, httpx.Client() as client:
        server.set(gauges=BUSY)
        source = detect(client, server.url, {}, POOL)
        poll(client, [source], {})
        time.sleep(0.3)
        server.set(retracted=3, ttft_s=[0.3] * 10, tpot_s=[0.025] * 10, generation_tokens=600)
        status = poll(client, [source], {})
    (replica,) = status["replicas"]
    assert replica["num_preemptions_total"] == 3 and replica["preemptions_per_min"] > 0
    assert 200 < replica["ttft_p50_ms"] <= 400  # inside SGLang's 0.2-0.4 s bucket
    assert 20 < replica["tpot_p50_ms"] <= 25
    assert replica["tokens_per_s"] > 0
    (line,) = status["departures"]
    assert "retractions/min" in line and "preemptions" not in line
    console = Console(width=80, record=True)
    console.print(view(status, 1.0))
    screen = console.export_text()
    assert "retractions/min" in screen and "preemptions/min" not in screen


def test_an_sglang_server_without_metrics_is_told_to_enable_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with fake_sglang(enable_metrics=False) as server:
        assert main(["top", server.url, "--once"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--enable-metrics" in err and "SGLang" in err


def test_engine_names_the_wrong_engine_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with fake_sglang() as server:
        assert main(["top", server.url, "--engine", "vllm", "--once"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "SGLang's metrics" in err
    with metered_upstream() as (url, upstream):
        upstream.metrics_text = engine_text(0.4, 40_000)
        assert main(["top", url, "--engine", "sglang", "--once"]) == 2
    assert "vLLM's metrics" in capsys.readouterr().err


def test_an_older_sglang_without_a_pool_gauge_shows_its_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SGLang's published example page predates `sglang:max_total_num_tokens`."""
    with metered_upstream() as (url, upstream):
        upstream.metrics_text = DOCS_SAMPLE
        (replica,) = _once(capsys, url)["replicas"]
    assert replica["engine"] == "sglang" and replica["kv_pool_tokens"] is None
    assert replica["kv_usage_pct"] == 28.0 and replica["kv_used_tokens"] == 123_859
    assert (replica["num_requests_running"], replica["num_requests_waiting"]) == (162, 2826)


def test_a_gateway_in_front_of_sglang_shows_sglangs_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The gateway scrapes its replica's /metrics; here the page is the stand-in's own scrape."""
    with fake_sglang() as server:
        server.set(gauges=BUSY, retracted=1)
        page = httpx.get(f"{server.url}/metrics", timeout=5).text
    with (
        metered_upstream() as (url, upstream),
        running_gateway(make_config([url], budget_tokens=POOL)) as gw,
    ):
        upstream.metrics_text = page
        status = _once(capsys, gw.url)
    (replica,) = status["replicas"]
    assert replica["engine"] == "sglang"
    assert (replica["kv_used_tokens"], replica["kv_pool_tokens"]) == (23_000, POOL)
