"""/ui in a real browser (Debian's headless chromium): the page shows the gateway's figures, the
plan-vs-live warning and the charts, and follows the engine as its KV use changes."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from kvwise.gateway.config import SecurityConfig
from tests.fake_upstream import Behaviour
from tests.gateway.servers import make_config, running_gateway
from tests.top.metered import engine_text, metered_upstream

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1200,900",
    "--virtual-time-budget=3000",  # the page's first polls, without waiting for them in real time
)  # fmt: skip


def _chromium(url: str, *action: str) -> str:
    binary = shutil.which("chromium")
    assert binary, "needs Debian's chromium: apt-get install -y chromium (scripts/test.sh does)"
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *action, url],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    return done.stdout


def test_the_page_shows_the_live_figures_and_follows_the_engine(tmp_path: Path) -> None:
    with (
        metered_upstream(Behaviour(pool_tokens=64_000)) as (url, upstream),
        running_gateway(make_config([url], budget_tokens=100_000)) as gw,
    ):
        upstream.metrics_text = engine_text(0.25, 64_000, running=2)
        httpx.get(f"{gw.url}/kvwise/status")  # a first point for the charts
        time.sleep(1.1)
        dom = _chromium(f"{gw.url}/ui", "--dump-dom")
        assert "16,000 / 64,000 (25 %)" in dom  # the engine's KV use, in tokens and %
        assert "36 % smaller than the planned 100,000" in dom and "kvwise calibrate" in dom
        assert 'data-series="kv_used_tokens"' in dom  # a line drawn, not an empty chart
        assert 'data-series="planned_pool_tokens"' in dom
        assert "gateway unreachable" not in dom
        upstream.metrics_text = engine_text(0.5, 64_000, running=4)
        time.sleep(1.1)
        screenshot = tmp_path / "ui.png"
        _chromium(f"{gw.url}/ui", f"--screenshot={screenshot}")
        dom = _chromium(f"{gw.url}/ui", "--dump-dom")
    assert "32,000 / 64,000 (50 %)" in dom
    assert (
        screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 20_000
    )


def test_with_admin_keys_the_page_shows_figures_only_to_a_browser_given_one() -> None:
    security = SecurityConfig(admin_keys=("sk-admin",))
    with (
        metered_upstream(Behaviour(pool_tokens=64_000)) as (url, upstream),
        running_gateway(make_config([url], budget_tokens=64_000, security=security)) as gw,
    ):
        upstream.metrics_text = engine_text(0.25, 64_000)
        host = gw.url.removeprefix("http://")
        logged_in = _chromium(f"http://admin:sk-admin@{host}/ui", "--dump-dom")
        anonymous = _chromium(f"{gw.url}/ui", "--dump-dom")
    assert "16,000 / 64,000 (25 %)" in logged_in  # the key typed in the login box is used
    assert "64,000" not in anonymous  # a login box (headless: an empty page), no figures


def _preempt_head(dom: str) -> str:
    head = dom.split('id="preempt-head">', 1)[1]
    return head.split("<", 1)[0]


def test_with_an_sglang_upstream_the_page_says_retractions_not_preemptions() -> None:
    # SGLang's /metrics page as its docs print it: it counts retractions
    # (sglang:num_retracted_requests_total), which the page shows in vLLM's preemption column
    sglang_page = (Path(__file__).parent / "data" / "sglang_docs_metrics_sample.txt").read_text()
    with (
        metered_upstream(Behaviour(pool_tokens=64_000)) as (url, upstream),
        running_gateway(make_config([url], budget_tokens=64_000)) as gw,
    ):
        upstream.metrics_text = sglang_page
        httpx.get(f"{gw.url}/kvwise/status")
        time.sleep(1.1)
        sglang_dom = _chromium(f"{gw.url}/ui", "--dump-dom")
        upstream.metrics_text = engine_text(0.25, 64_000)  # the same replica, now vLLM's page
        time.sleep(1.1)
        vllm_dom = _chromium(f"{gw.url}/ui", "--dump-dom")
    assert _preempt_head(sglang_dom) == "retractions/min"
    assert "Retractions (engines)" in sglang_dom and "Preemptions" not in sglang_dom
    assert _preempt_head(vllm_dom) == "preempt/min"
    assert "Preemptions (engines)" in vllm_dom and "etraction" not in vllm_dom
