"""Gateways active-active on one KV budget (`--admission-store redis://`), with a real Redis.

The gateways are `kvwise serve` subprocesses, as users run them; the upstream is the fake one, so
what is measured is the gateways: how many requests the upstream holds at once, counted there.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from kvwise.gateway.admission import AdmissionConfig
from tests.engine_fixture import RedisProcess, free_port
from tests.fake_upstream import Behaviour
from tests.gateway.servers import (
    fake_upstreams,
    make_config,
    running_gateway,
    wait_listening,
    wait_until,
)

LEASE_TTL_S = 3.0  # AdmissionConfig's default, which `kvwise serve` uses
# max_tokens 1000 plus a prompt bound of a few tokens: 7 requests fit in 8000 KV tokens, not 8
BUDGET_TOKENS = 8000
MAX_TOKENS = 1000
FITS = 7
BODY = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": MAX_TOKENS}


@contextmanager
def gateway_process(args: list[str], tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    command = [sys.executable, "-m", "kvwise.cli", "serve", "--port", str(port),
               "--session-store", str(tmp_path / f"s{port}.sqlite3"), *args]  # fmt: skip
    log = (tmp_path / f"gateway-{port}.log").open("w")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True)
    log.close()
    try:
        url = f"http://127.0.0.1:{port}"
        assert wait_listening(url, timeout_s=30), (tmp_path / f"gateway-{port}.log").read_text()
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def serve_args(upstream: str, store: str, *extra: str) -> list[str]:
    return ["--upstream", upstream, "--admission-store", store, *extra]


def test_two_gateways_never_admit_past_one_budget_under_a_burst(
    redis_server: RedisProcess, tmp_path: Path, fidelity_report: list[str]
) -> None:
    store = redis_server.url.rsplit("/", 1)[0] + "/1"
    with fake_upstreams(Behaviour(ttft_s=0.3)) as ups, ExitStack() as stack:
        upstream, fake = ups[0]
        args = serve_args(upstream, store, "--kv-budget-tokens", str(BUDGET_TOKENS),
                          "--max-queue", "8", "--queue-timeout", "30")  # fmt: skip
        urls = [stack.enter_context(gateway_process(args, tmp_path))[0] for _ in range(2)]

        async def burst() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=60) as api:
                return await asyncio.gather(
                    *(api.post(f"{urls[i % 2]}/v1/chat/completions", json=BODY) for i in range(64))
                )

        replies = asyncio.run(burst())
    for log in tmp_path.glob("gateway-*.log"):  # what each printed at start
        assert f"admission:     shared with every gateway on {store}" in log.read_text()
    statuses = [r.status_code for r in replies]
    refused = [r for r in replies if r.status_code == 429]
    fidelity_report.append(
        f"shared admission, 2 gateways, 64-request burst: upstream peak in flight "
        f"{fake.peak_running} (budget fits {FITS}), {len(refused)} x 429, "
        f"{statuses.count(200)} x 200"
    )
    assert set(statuses) <= {200, 429}, statuses  # nothing 5xx
    assert fake.peak_running == FITS  # one budget, used whole, by both gateways together
    assert refused and all(int(r.headers["retry-after"]) >= 1 for r in refused)
    assert all(r.json()["error"]["type"] == "rate_limit_exceeded" for r in refused)
    assert statuses.count(200) >= FITS + 2 * 8  # the admitted, then both queues, served


def _post_in_background(url: str, num: int, results: list[int]) -> list[threading.Thread]:
    def post() -> None:
        try:
            results.append(
                httpx.post(f"{url}/v1/chat/completions", json=BODY, timeout=60).status_code
            )
        except httpx.TransportError:
            results.append(-1)  # the gateway was killed under it

    threads = [threading.Thread(target=post, daemon=True) for _ in range(num)]
    for thread in threads:
        thread.start()
    return threads


def test_a_killed_gateway_share_returns_within_its_lease(
    redis_server: RedisProcess, tmp_path: Path, fidelity_report: list[str]
) -> None:
    store = redis_server.url.rsplit("/", 1)[0] + "/2"
    with fake_upstreams(Behaviour(ttft_s=8.0)) as ups, ExitStack() as stack:
        upstream, fake = ups[0]
        args = serve_args(upstream, store, "--max-num-seqs", "4", "--queue-timeout", "30")
        (url_a, proc_a), (url_b, _) = (
            stack.enter_context(gateway_process(args, tmp_path)) for _ in range(2)
        )
        from_a: list[int] = []
        _post_in_background(url_a, 4, from_a)
        assert wait_until(lambda: fake.num_requests == 4)
        from_b: list[int] = []
        threads_b = _post_in_background(url_b, 4, from_b)
        time.sleep(1.5)
        assert fake.num_requests == 4  # A holds the whole running cap: B's requests wait
        proc_a.kill()  # kill -9: no goodbye to Redis
        killed_s = time.monotonic()
        assert wait_until(lambda: fake.num_requests == 8, timeout_s=LEASE_TTL_S + 5)
        recovery_s = time.monotonic() - killed_s
        for thread in threads_b:
            thread.join(timeout=30)
    fidelity_report.append(
        f"shared admission: kill -9 of one gateway holding the whole cap (4): the other "
        f"admitted all 4 of its own {recovery_s:.2f} s later (lease {LEASE_TTL_S} s)"
    )
    assert recovery_s <= LEASE_TTL_S + 1.0  # + a poll and the forwarding, on a busy machine
    assert from_b == [200] * 4


def test_redis_down_is_503_and_admission_resumes_when_it_returns(
    tmp_path: Path, fidelity_report: list[str]
) -> None:
    redis = RedisProcess(log_path=tmp_path / "redis.log").start()
    try:
        admission = AdmissionConfig(8, 10.0, store=redis.url)
        with fake_upstreams(Behaviour()) as ups:  # one request of BODY fits in 1500 tokens
            config = make_config([ups[0][0]], budget_tokens=1500, admission=admission)
            with running_gateway(config) as gateway:
                chat = f"{gateway.url}/v1/chat/completions"
                small = {**BODY, "max_tokens": 2}
                assert httpx.post(chat, json=small).status_code == 200
                # one running (it finishes: it was admitted), one queued behind it (503)
                ups[0][1].behaviour.ttft_s = 2.0
                running: list[int] = []
                _post_in_background(gateway.url, 1, running)
                assert wait_until(lambda: ups[0][1].num_running == 1)
                queued: list[int] = []
                _post_in_background(gateway.url, 1, queued)
                assert wait_until(lambda: len(gateway.gateway.admission.queue) == 1)
                redis.stop()
                assert wait_until(lambda: queued == [503], timeout_s=5)
                assert wait_until(lambda: running == [200], timeout_s=5)
                ups[0][1].behaviour.ttft_s = 0.0
                down = httpx.post(chat, json=small)
                assert down.status_code == 503
                assert down.json()["error"]["type"] == "service_unavailable"
                assert "admission store" in down.json()["error"]["message"]
                assert "retry-after" in down.headers
                redis.start()  # same port, empty: the gateway registers again
                back_s = time.monotonic()
                assert wait_until(lambda: httpx.post(chat, json=small).status_code == 200)
                fidelity_report.append(
                    f"shared admission: Redis restarted, first 200 after "
                    f"{time.monotonic() - back_s:.2f} s"
                )
    finally:
        redis.stop()


@pytest.mark.parametrize("store", ["http://127.0.0.1:6379", "127.0.0.1:6379"])
def test_an_admission_store_that_is_not_redis_is_one_line(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvwise.cli import main

    args = ["serve", "--upstream", "http://127.0.0.1:9", "--kv-budget-tokens", "1000",
            "--max-model-len", "512", "--admission-store", store]  # fmt: skip
    assert main(args) == 2
    assert "--admission-store" in capsys.readouterr().err


def test_a_release_lost_in_a_redis_blip_is_sent_again_so_no_budget_leaks(
    redis_server: RedisProcess,
) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    store = redis_server.url.rsplit("/", 1)[0] + "/3"
    # one request of 1000+ tokens fits in 1500; a leaked reservation would keep the next out
    admission = AdmissionConfig(8, 4.0, store=store)
    with fake_upstreams(Behaviour()) as ups:
        config = make_config([ups[0][0]], budget_tokens=1500, admission=admission)
        with running_gateway(config) as gateway:
            shared = gateway.gateway.admission
            send_release = shared._release  # type: ignore[attr-defined]
            num_cut: list[int] = []

            async def cut_once(**kwargs: object) -> object:
                if not num_cut:
                    num_cut.append(1)
                    raise RedisConnectionError("connection reset (injected)")
                return await send_release(**kwargs)

            shared._release = cut_once  # type: ignore[attr-defined]
            chat = f"{gateway.url}/v1/chat/completions"
            assert httpx.post(chat, json=BODY, timeout=30).status_code == 200
            assert wait_until(lambda: num_cut == [1])  # its release was lost
            assert httpx.post(chat, json=BODY, timeout=30).status_code == 200
            assert httpx.post(chat, json=BODY, timeout=30).status_code == 200


def test_the_start_up_summary_never_prints_the_store_password(tmp_path: Path) -> None:
    with fake_upstreams(Behaviour()) as ups:
        store = "redis://:s3cret@127.0.0.1:1/0"  # nothing listens: 503s, yet it starts
        args = ["--upstream", ups[0][0], "--admission-store", store]
        with gateway_process(args, tmp_path) as (url, _):
            reply = httpx.post(f"{url}/v1/chat/completions", json=BODY)
    assert reply.status_code == 503
    printed = next(tmp_path.glob("gateway-*.log")).read_text()
    assert "redis://:***@127.0.0.1:1/0" in printed and "s3cret" not in printed
