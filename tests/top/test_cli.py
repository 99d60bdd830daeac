"""`kvwise top --once --json` against a gateway and against an engine read directly."""

from __future__ import annotations

import json
from dataclasses import replace

import httpx
import pytest
from rich.console import Console

from kvwise.cli import main
from kvwise.gateway.config import SecurityConfig
from kvwise.top.render import view
from kvwise.top.sources import Source, poll
from tests.engine_fixture import free_port
from tests.gateway.servers import make_config, running_gateway
from tests.top.metered import engine_text, metered_upstream


def _once(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["top", *args, "--once", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_top_shows_the_gateway_and_the_engine_behind_it(capsys: pytest.CaptureFixture[str]) -> None:
    security = SecurityConfig(admin_keys=("sk-admin",))
    with (
        metered_upstream() as (url, upstream),
        running_gateway(make_config([url], budget_tokens=50_000, security=security)) as gw,
    ):
        upstream.metrics_text = engine_text(0.4, 40_000, running=2, waiting=1)
        status = _once(capsys, gw.url, "--admin-key", "sk-admin")
    assert status["source"] == "gateway"
    (replica,) = status["replicas"]
    assert (replica["kv_used_tokens"], replica["kv_pool_tokens"]) == (16_000, 40_000)
    assert (replica["num_requests_running"], replica["num_requests_waiting"]) == (2, 1)
    assert status["gateway"]["budget_tokens"] == 50_000
    assert "20 % smaller than the planned 50,000" in status["departures"][0]


def test_top_reads_engines_directly_and_compares_with_a_given_plan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with metered_upstream() as (url, upstream):
        upstream.metrics_text = engine_text(0.5, 32_000, num_preemptions=1)
        status = _once(capsys, url, "--interval", "0.3", "--planned-kv-tokens", "32000")
    assert status["source"] == "engines" and status["gateway"] is None
    (replica,) = status["replicas"]
    assert replica["kv_used_tokens"] == 16_000 and replica["planned_pool_tokens"] == 32_000
    assert replica["window_s"] > 0  # two scrapes, an interval apart
    assert status["departures"] == []  # pool as planned, no preemption within the window


def test_an_unreachable_url_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["top", url, "--once"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach" in err and url in err


def test_a_bad_option_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["top", "--interval", "soon"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--interval" in err and "'soon'" in err


def test_a_gateway_with_admin_keys_asks_for_one(capsys: pytest.CaptureFixture[str]) -> None:
    security = SecurityConfig(admin_keys=("sk-admin",))
    with (
        metered_upstream() as (url, _),
        running_gateway(make_config([url], security=security)) as gw,
    ):
        assert main(["top", gw.url, "--once"]) == 2
    assert "--admin-key" in capsys.readouterr().err


def test_the_terminal_view_names_the_figures(capsys: pytest.CaptureFixture[str]) -> None:
    with (
        metered_upstream() as (url, upstream),
        running_gateway(make_config([url], budget_tokens=50_000)) as gw,
    ):
        upstream.metrics_text = engine_text(0.4, 40_000)
        assert main(["top", gw.url, "--once"]) == 0
    out = capsys.readouterr().out
    assert "16,000 / 40,000" in out and "queue depth" in out and "kvwise calibrate" in out


def test_a_gateway_gone_mid_run_is_a_line_in_the_view_not_a_crash() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with httpx.Client() as client:
        status = poll(client, [Source(url, is_gateway=True)], {})
    assert status["source"] == "gateway" and status["replicas"] == []
    (line,) = status["unreachable"]
    assert url in line and "retrying" in line
    console = Console(width=80, record=True)
    console.print(view(status, 1.0))
    assert "unreachable" in console.export_text()


def test_gpu_memory_from_nvml_shows_in_json_and_in_the_view(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML cannot run here (no GPU): a card as NVML would report it stands in for the probe,
    and the figures must reach the JSON and the terminal view."""
    from kvwise.core import gpus

    card = gpus.find_gpu("rtx4090")
    seen = replace(card, free_bytes=card.memory_bytes - 20 * gpus.GIB)
    monkeypatch.setattr(gpus, "detect_gpus", lambda: [seen])
    with (
        metered_upstream() as (url, upstream),
        running_gateway(make_config([url], budget_tokens=50_000)) as gw,
    ):
        upstream.metrics_text = engine_text(0.4, 40_000)
        status = _once(capsys, gw.url)
        (gpu,) = status["host"]["gpus"]
        assert (gpu["name"], gpu["used_gib"]) == ("RTX 4090", 20.0)
        assert main(["top", gw.url, "--once"]) == 0
    assert f"GPU 0 RTX 4090: 20.0 / {gpu['total_gib']:.1f} GiB used" in capsys.readouterr().out
