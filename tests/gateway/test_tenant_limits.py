"""Per-key limits from the keys file, as tenants see them through the real `openai` client:
429 in OpenAI's shape naming the key's limit, counted per key name in /metrics, a key revoked
or limited anew without a restart, and KV-token fairness between a heavy and a light key.

The upstream is a fake (not an engine) that answers every request after a fixed time: what is
measured is the gateway's own enforcement and scheduling, and it must not drown in an engine's
jitter on a shared 2-core machine.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from kvwise.gateway.config import SecurityConfig
from tests.fake_upstream import Behaviour
from tests.gateway.servers import fake_upstreams, make_config, running_gateway, wait_until
from tests.gateway.test_cli import kvwise_serve

ALICE = "sk-alice-0123456789abcdef"
BOB = "sk-bob-0123456789abcdefgh"


def keys_yaml(path: Path, alice: str = "", bob: str = "", bob_key: str = BOB) -> Path:
    path.write_text(
        f"keys:\n  - name: alice\n    key: {ALICE}\n{alice}  - name: bob\n    key: {bob_key}\n{bob}"
    )
    return path


def ask(url: str, key: str, text: str = "hi", max_tokens: int = 2) -> str:
    with openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0) as api:
        reply = api.chat.completions.create(
            model="fake", messages=[{"role": "user", "content": text}], max_tokens=max_tokens
        )
    return reply.choices[0].message.content or ""


async def ask_async(api: openai.AsyncOpenAI, text: str, max_tokens: int = 2) -> int:
    try:
        await api.chat.completions.create(
            model="fake", messages=[{"role": "user", "content": text}], max_tokens=max_tokens
        )
    except openai.RateLimitError as exc:
        assert isinstance(exc.body, dict) and exc.body["type"] == "rate_limit_exceeded"
        return 429
    return 200


def key_metric(url: str, name: str, series: str = "kvwise_key_requests_total") -> dict[str, float]:
    text = httpx.get(f"{url}/metrics").text
    assert ALICE not in text and BOB not in text  # names only, never a key
    pattern = rf'^{series}{{key="{name}"(?:,outcome="(\w+)")?}} (\S+)$'
    return {m[1] or "": float(m[2]) for m in re.finditer(pattern, text, re.M)}


def one_at_a_time(urls: list[str], **changes: Any) -> Any:
    """A gateway whose single replica runs one request at a time (its max_num_seqs)."""
    config = make_config(urls, **changes)
    upstream = replace(config.upstreams[0], max_num_seqs=1)
    return replace(config, upstreams=(upstream,))


def test_a_keys_rate_is_its_own_429_named_and_counted(tmp_path: Path) -> None:
    path = keys_yaml(tmp_path / "keys.yaml", alice="    rate_rps: 0.01\n    burst: 2\n")
    security = SecurityConfig(api_keys_file=str(path))
    with (
        fake_upstreams(Behaviour()) as ups,
        running_gateway(make_config([ups[0][0]], security=security)) as gw,
    ):
        ask(gw.url, ALICE)
        ask(gw.url, ALICE)  # a burst of 2
        with pytest.raises(openai.RateLimitError) as caught:
            ask(gw.url, ALICE)
        assert "rate limit of key 'alice' exceeded" in caught.value.message
        assert int(caught.value.response.headers["retry-after"]) >= 1
        for _ in range(4):
            ask(gw.url, BOB)  # bob has no rate of his own: alice's bucket is not his
        assert key_metric(gw.url, "alice") == {"admitted": 2, "rate_limited": 1}
        assert key_metric(gw.url, "bob") == {"admitted": 4}


def test_a_keys_concurrency_cap_refuses_the_request_beyond_it(tmp_path: Path) -> None:
    path = keys_yaml(tmp_path / "keys.yaml", alice="    max_concurrency: 2\n")
    security = SecurityConfig(api_keys_file=str(path))
    with (
        fake_upstreams(Behaviour(ttft_s=0.5)) as ups,
        running_gateway(make_config([ups[0][0]], security=security)) as gw,
    ):

        async def scenario() -> tuple[list[int], list[int]]:
            async with (
                openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=ALICE, max_retries=0) as a,
                openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=BOB, max_retries=0) as b,
            ):
                alice = asyncio.gather(*(ask_async(a, "hi") for _ in range(3)))
                bob = asyncio.gather(*(ask_async(b, "hi") for _ in range(3)))
                return await alice, await bob

        alice, bob = asyncio.run(scenario())
        assert sorted(alice) == [200, 200, 429] and bob == [200, 200, 200]
        assert key_metric(gw.url, "alice")["concurrency_limited"] == 1
        assert key_metric(gw.url, "alice", "kvwise_key_requests_in_progress") == {"": 0}
        ask(gw.url, ALICE)  # the slots were given back


def test_a_key_over_its_queue_share_gets_429_while_another_key_is_still_queued(
    tmp_path: Path,
) -> None:
    """One request runs at a time; alice may hold 2 of the 8 places in the queue."""
    path = keys_yaml(tmp_path / "keys.yaml", alice="    queue_share: 0.25\n")
    security = SecurityConfig(api_keys_file=str(path))
    with fake_upstreams(Behaviour(ttft_s=0.3)) as ups:
        config = one_at_a_time([ups[0][0]], security=security, max_queue=8)
        with running_gateway(config) as gw:

            async def scenario() -> tuple[list[int], int]:
                async with (
                    openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=ALICE, max_retries=0) as a,
                    openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=BOB, max_retries=0) as b,
                ):
                    alice = [ask_async(a, f"a{i}") for i in range(5)]  # 1 runs, 2 wait
                    late_bob = _later(0.2, ask_async(b, "b"))
                    *statuses, bob = await asyncio.gather(*alice, late_bob)
                    return statuses, bob

            alice, bob = asyncio.run(scenario())
            assert sorted(alice) == [200, 200, 200, 429, 429] and bob == 200
            assert key_metric(gw.url, "alice")["queue_share_limited"] == 2


async def _later(delay_s: float, coro: Any) -> Any:
    await asyncio.sleep(delay_s)
    return await coro


def test_a_key_removed_or_limited_in_the_file_is_at_once_without_a_restart(
    tmp_path: Path,
) -> None:
    path = keys_yaml(tmp_path / "keys.yaml")
    security = SecurityConfig(api_keys_file=str(path))
    with (
        fake_upstreams(Behaviour()) as ups,
        running_gateway(make_config([ups[0][0]], security=security)) as gw,
    ):
        ask(gw.url, BOB)
        path.write_text(f"keys:\n  - name: alice\n    key: {ALICE}\n    rate_rps: 0.01\n")

        def bob_refused() -> bool:
            try:
                ask(gw.url, BOB)
            except openai.AuthenticationError:
                return True
            return False

        assert wait_until(bob_refused, timeout_s=5)  # the next health tick (0.2 s here)
        ask(gw.url, ALICE)  # a bucket of one second's worth: one request...
        with pytest.raises(openai.RateLimitError):
            ask(gw.url, ALICE)  # ...and her new rate holds


def test_sighup_reads_the_keys_file_at_once(tmp_path: Path) -> None:
    """A rotated key of the same length, written with the old modification time: only the
    signal can tell the gateway (as after a copy that keeps times, `cp -p`)."""
    path = keys_yaml(tmp_path / "keys.yaml")
    stat = path.stat()
    with (
        fake_upstreams(Behaviour()) as ups,
        kvwise_serve(["--upstream", ups[0][0], "--keys-file", str(path)], tmp_path) as (url, _),
    ):
        ask(url, BOB)
        rotated = BOB[:-4] + "wxyz"
        keys_yaml(path, bob_key=rotated)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        time.sleep(1.5)  # health ticks (1 s) see no change
        ask(url, BOB)
        pid = _serve_pid(url)
        os.kill(pid, signal.SIGHUP)
        assert wait_until(lambda: _refused(url, BOB), timeout_s=3)
        assert ask(url, rotated)


def _refused(url: str, key: str) -> bool:
    try:
        ask(url, key)
    except openai.AuthenticationError:
        return True
    return False


def _serve_pid(url: str) -> int:
    """The `kvwise serve` child process listening on `url`'s port."""
    port = url.rsplit(":", 1)[1]
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        for pid in (task / "children").read_text().split():
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"serve" in argv and port.encode() in argv:
                return int(pid)
    raise AssertionError(f"no kvwise serve child on port {port}")
