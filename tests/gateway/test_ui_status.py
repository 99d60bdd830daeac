"""GET /kvwise/status, /ui: the figures a person watching the gateway would check against what
they know: the engine's own /metrics, the load they are sending, the keys they configured."""

from __future__ import annotations

import base64
import re
import threading
import time
from typing import Any

import httpx

from kvwise.gateway.config import SecurityConfig
from tests.fake_upstream import Behaviour
from tests.gateway.servers import make_config, running_gateway, wait_until
from tests.top.metered import engine_text, metered_upstream

PROMPT = "x" * 200  # 200 UTF-8 bytes: the gateway's upper bound on its tokens


def _status(url: str, **kwargs: Any) -> dict[str, Any]:
    response = httpx.get(f"{url}/kvwise/status", **kwargs)
    assert response.status_code == 200, response.text
    return response.json()


def _send(url: str, num: int, results: list[int]) -> list[threading.Thread]:
    def one() -> None:
        body = {"model": "m", "prompt": PROMPT, "max_tokens": 100, "stream": True}
        results.append(httpx.post(f"{url}/v1/completions", json=body, timeout=60).status_code)

    threads = [threading.Thread(target=one) for _ in range(num)]
    for thread in threads:
        thread.start()
    return threads


def test_kv_use_and_the_plan_line_are_the_engines_own_figures() -> None:
    with metered_upstream(Behaviour(pool_tokens=64_000)) as (url, upstream):
        # the engine's pool is 64,000 tokens, 36 % less than the 100,000 the gateway plans for
        upstream.metrics_text = engine_text(0.25, 64_000, num_preemptions=2, running=3)
        with running_gateway(make_config([url], budget_tokens=100_000)) as gw:
            (replica,) = _status(gw.url)["replicas"]
            assert replica["kv_used_tokens"] == 16_000
            assert replica["kv_pool_tokens"] == 64_000
            assert replica["planned_pool_tokens"] == 100_000
            assert replica["num_requests_running"] == 3
            time.sleep(1.1)  # past the status' refresh period: a second scrape, a window
            upstream.metrics_text = engine_text(0.5, 64_000, num_preemptions=5, running=3)
            status = _status(gw.url)
            (replica,) = status["replicas"]
            assert replica["kv_used_tokens"] == 32_000
            assert replica["preemptions_per_min"] > 0
            pool_line, preemption_line = status["departures"]
            assert "64,000" in pool_line and "100,000" in pool_line and "36 %" in pool_line
            assert "preemptions/min" in preemption_line
            assert all("kvwise calibrate" in line for line in status["departures"])
            points = status["history"]
            assert [p["kv_used_tokens"] for p in points] == [16_000, 32_000]
            assert points[-1]["planned_pool_tokens"] == 100_000


def test_queue_depth_rises_under_load_and_falls_when_it_drains() -> None:
    with (
        metered_upstream(Behaviour(ttft_s=2.0)) as (url, _),
        running_gateway(make_config([url], budget_tokens=1_000)) as gw,
    ):
        assert _status(gw.url)["gateway"]["queue_depth"] == 0
        results: list[int] = []
        threads = _send(gw.url, 8, results)  # ~300 KV tokens each: 3 fit in 1,000

        def queued() -> int:
            time.sleep(1.05)
            return int(_status(gw.url)["gateway"]["queue_depth"])

        assert wait_until(lambda: queued() >= 3, timeout_s=10)
        status = _status(gw.url)["gateway"]
        assert 0 < status["reserved_tokens"] <= status["budget_tokens"] == 1_000
        assert status["top_queued_flows"][0]["queued_tokens"] >= 300
        for thread in threads:
            thread.join()
        assert results == [200] * 8
        assert wait_until(lambda: queued() == 0, timeout_s=10)
        final = _status(gw.url)["gateway"]
        assert final["num_admitted"] == 8 and final["num_queued"] >= 3
        # every request waited the upstream's 2 s for its first token (more when queued);
        # the histogram's buckets around it are (1, 2.5] and (2.5, 5] s
        assert final["ttft_p50_ms"] is not None and final["ttft_p50_ms"] > 1_000


def test_rejections_show_as_a_429_rate() -> None:
    with metered_upstream(Behaviour(ttft_s=0.5)) as (url, _):
        config = make_config([url], budget_tokens=400, max_queue=1)
        with running_gateway(config) as gw:
            _status(gw.url)  # the start of the window
            results: list[int] = []
            for thread in _send(gw.url, 6, results):
                thread.join()
            assert results.count(429) >= 3
            time.sleep(1.05)
            gateway = _status(gw.url)["gateway"]
            assert gateway["num_rejected"] == results.count(429)
            assert gateway["rejected_429_per_min"] > 0


def test_the_status_and_the_page_need_the_admin_key_when_keys_are_set() -> None:
    security = SecurityConfig(api_keys=("sk-user",), admin_keys=("sk-admin",))
    with (
        metered_upstream() as (url, _),
        running_gateway(make_config([url], security=security)) as gw,
    ):
        for path in ("/kvwise/status", "/ui", "/ui/ui.js"):
            anonymous = httpx.get(f"{gw.url}{path}")
            assert anonymous.status_code == 401
            assert anonymous.headers["www-authenticate"].startswith("Basic")  # the login box
            user = httpx.get(f"{gw.url}{path}", headers={"authorization": "Bearer sk-user"})
            assert user.status_code == 401  # an API key is not an admin key
        admin = {"authorization": "Bearer sk-admin"}
        assert _status(gw.url, headers=admin)["replicas"][0]["name"] == "r0"
        basic = base64.b64encode(b"me:sk-admin").decode()
        page = httpx.get(f"{gw.url}/ui", headers={"authorization": f"Basic {basic}"})
        assert page.status_code == 200  # a browser sends the key typed in its login box
        assert '<script src="/ui/ui.js"' in page.text


def test_the_page_is_self_contained_and_small() -> None:
    with metered_upstream() as (url, _), running_gateway(make_config([url])) as gw:
        total_bytes = 0
        for path in ("/ui", "/ui/ui.js", "/ui/ui.css"):
            response = httpx.get(f"{gw.url}{path}")
            assert response.status_code == 200
            # nothing loaded from elsewhere (the SVG namespace URI is a name, not a load)
            assert not re.search(r"(src|href)=[\"']?https?:|@import|fetch\(\"http", response.text)
            assert response.headers["content-security-policy"].startswith("default-src 'self'")
            total_bytes += len(response.content)
        assert total_bytes < 20_000
        assert httpx.get(f"{gw.url}/ui/other.js").status_code == 404
