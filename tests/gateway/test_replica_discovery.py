"""Replicas that come and go: found through a real DNS server, added and drained by an admin.

The name is served by a real nameserver on loopback (dnslib, UDP) whose records change while
the gateway runs, as a Kubernetes headless Service's do. The upstreams are fakes (not engines):
these tests measure the gateway's own behaviour (who gets which request, what happens to a
stream in flight when its replica leaves), which needs replicas at distinct addresses on one
port, and streams of a known length and pace. The real engine's run is in
test_replica_discovery_engine.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvwise.cli import main
from kvwise.gateway.config import SecurityConfig
from kvwise.gateway.fake_upstream import Behaviour, FakeUpstream
from kvwise.gateway.membership import MembershipConfig
from kvwise.gateway.replica_dns import DnsTarget, resolve_urls
from kvwise.gateway.replicas import Replica
from kvwise.gateway.routing import Router
from tests.engine_fixture import free_port
from tests.gateway.dns_server import Records, dns_server
from tests.gateway.servers import (
    LoopThread,
    RunningGateway,
    make_config,
    running_gateway,
    session_config,
    wait_until,
)
from tests.gateway.test_cli import kvwise_serve

NAME = "vllm-headless.default.svc.cluster.local"
ADMIN = {"authorization": "Bearer admin-key"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


@contextmanager
def fakes_on(addresses: list[str], port: int) -> Iterator[dict[str, FakeUpstream]]:
    """One fake upstream per loopback address, all on the same port (as pods of one Service)."""
    loop = LoopThread()
    servers = {address: FakeUpstream(Behaviour(), name=address) for address in addresses}
    try:
        for address, server in servers.items():
            loop.run(server.start(address, port))
        yield servers
    finally:
        for server in servers.values():
            loop.run(server.stop())
        loop.close()


@contextmanager
def dns_gateway(**changes: Any) -> Iterator[tuple[RunningGateway, Records, int]]:
    """A gateway finding its replicas by NAME on a real nameserver; (gateway, records, port)."""
    engine_port = free_port()
    with dns_server() as (records, dns_port):
        target = DnsTarget(NAME, engine_port, "127.0.0.1", dns_port)
        config = make_config(
            [], security=SecurityConfig(admin_keys=("admin-key",)),
            membership=MembershipConfig(100_000, None, target, dns_interval_s=0.2),
        )  # fmt: skip
        with running_gateway(replace(config, **changes)) as gw:
            yield gw, records, engine_port


def states(gw: RunningGateway) -> dict[str, str]:
    rows = httpx.get(f"{gw.url}/kvwise/replicas", headers=ADMIN).json()["replicas"]
    return {row["url"]: row["state"] for row in rows}


def chat(gw: RunningGateway, session: str = "", **changes: Any) -> httpx.Response:
    headers = {"x-session-id": session} if session else {}
    return httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT | changes, headers=headers,
                      timeout=30)  # fmt: skip


def test_replicas_follow_the_name_and_a_vanished_one_finishes_its_stream() -> None:
    a, b = "127.0.0.2", "127.0.0.3"
    with dns_gateway() as (gw, records, port), fakes_on([a, b], port) as fakes:
        url_a, url_b = f"http://{a}:{port}", f"http://{b}:{port}"
        assert chat(gw).status_code == 503  # nothing resolves yet
        records.set(NAME, [a])
        assert wait_until(lambda: states(gw) == {url_a: "serving"})
        assert chat(gw).status_code == 200 and fakes[a].num_requests == 1

        records.set(NAME, [a, b])  # a new pod: joins once its health check passes
        assert wait_until(lambda: states(gw) == {url_a: "serving", url_b: "serving"})
        for i in range(12):
            assert chat(gw, session=f"s{i}").status_code == 200
        assert fakes[b].num_requests > 0  # sessions spread over both

        fakes[b].behaviour.itl_s = 0.05  # a 40-token stream takes ~2 s on b
        session_on_b = next(f"s{i}" for i in range(100) if _lands_on(gw, f"s{i}", url_b))
        streamed: list[str] = []
        thread = threading.Thread(target=lambda: streamed.extend(_stream(gw, session_on_b)))
        before = fakes[b].num_requests
        thread.start()
        assert wait_until(lambda: fakes[b].num_running == 1)
        records.set(NAME, [a])  # b's pod is going away
        assert wait_until(lambda: states(gw).get(url_b) == "draining")
        for i in range(8):  # new requests, b's own session included, go to a
            assert chat(gw, session=session_on_b if i == 0 else f"t{i}").status_code == 200
        assert fakes[b].num_requests == before + 1
        thread.join(timeout=30)
        assert streamed[-1] == "[DONE]" and len(streamed) == 40 + 2  # every token, then the end
        assert wait_until(lambda: states(gw) == {url_a: "serving"})  # dropped once it finished


def _lands_on(gw: RunningGateway, session: str, url: str) -> bool:
    router = gw.gateway.admission.router  # the session's key as the gateway scopes it
    return router.ring_order(f"session:open/{session}")[0].url == url


def _stream(gw: RunningGateway, session: str) -> list[str]:
    body = CHAT | {"stream": True, "max_tokens": 40}
    events = []
    with httpx.stream("POST", f"{gw.url}/v1/chat/completions", json=body, timeout=60,
                      headers={"x-session-id": session}) as response:  # fmt: skip
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    return events


def test_a_listed_replica_joins_only_once_it_answers_its_health_check() -> None:
    a, late = "127.0.0.2", "127.0.0.4"
    with dns_gateway() as (gw, records, port), fakes_on([a], port) as fakes:
        records.set(NAME, [a, late])  # late: a pod listed before its engine listens
        url_late = f"http://{late}:{port}"
        assert wait_until(lambda: states(gw).get(f"http://{a}:{port}") == "serving")
        assert states(gw)[url_late] == "pending"
        for i in range(6):
            assert chat(gw, session=f"s{i}").status_code == 200
        assert fakes[a].num_requests == 6
        with fakes_on([late], port) as more:  # its engine is up now
            assert wait_until(lambda: states(gw).get(url_late) == "serving")
            for i in range(12):
                chat(gw, session=f"u{i}")
            assert more[late].num_requests > 0


def test_a_session_moves_with_its_history_when_an_admin_drains_its_replica(
    tmp_path: Path,
) -> None:
    a, b = "127.0.0.2", "127.0.0.3"
    sessions = session_config(str(tmp_path / "sessions.sqlite3"))
    with dns_gateway(sessions=sessions) as (gw, records, port), fakes_on([a, b], port) as fakes:
        records.set(NAME, [a, b])
        assert wait_until(lambda: set(states(gw).values()) == {"serving"} and len(states(gw)) == 2)
        first = {"role": "user", "content": "remember the number 41"}
        assert chat(gw, session="agent", messages=[first]).status_code == 200
        home = next(address for address in (a, b) if fakes[address].num_requests == 1)
        other = b if home == a else a
        drained = httpx.post(f"{gw.url}/kvwise/replicas/drain", headers=ADMIN,
                             json={"url": f"http://{home}:{port}"})  # fmt: skip
        assert drained.status_code == 200 and drained.json()["state"] == "removed"  # idle
        second = {"role": "user", "content": "which number?"}
        assert chat(gw, session="agent", messages=[second]).status_code == 200
        received = fakes[other].last_request["messages"]
        assert isinstance(received, list)
        assert received[0]["content"] == first["content"]  # the history came along
        assert received[-1]["content"] == second["content"] and len(received) == 3
        # the name still lists it, but an admin's drain holds until an admin adds it again
        time.sleep(1.0)  # five resolutions
        assert len(states(gw)) == 1
        added = httpx.post(f"{gw.url}/kvwise/replicas", headers=ADMIN,
                           json={"url": f"http://{home}:{port}"})  # fmt: skip
        assert added.status_code == 200 and added.json()["state"] == "serving"


def test_changing_replicas_needs_an_admin_key() -> None:
    with fakes_on(["127.0.0.2"], free_port()) as fakes:
        (address, fake), = fakes.items()  # fmt: skip
        url = f"http://{address}:{fake.server.port if fake.server else 0}"
        open_config = make_config([url])
        with running_gateway(open_config) as gw:  # no admin key configured: nobody may
            response = httpx.post(f"{gw.url}/kvwise/replicas", json={"url": url})
            assert response.status_code == 403 and "--admin-key" in response.text
        secured = replace(open_config, security=SecurityConfig(admin_keys=("admin-key",)))
        with running_gateway(secured) as gw:
            wrong = httpx.post(f"{gw.url}/kvwise/replicas/drain", json={"url": url},
                               headers={"authorization": "Bearer guess"})  # fmt: skip
            assert wrong.status_code == 401 and states(gw) == {url: "serving"}
            unknown = httpx.post(f"{gw.url}/kvwise/replicas/drain", headers=ADMIN,
                                 json={"url": "http://10.9.9.9:8000"})  # fmt: skip
            assert unknown.status_code == 404
            bad = httpx.post(f"{gw.url}/kvwise/replicas", headers=ADMIN, json={"url": "x"})
            assert bad.status_code == 400


def test_resolution_reads_a_and_aaaa_and_tells_no_answer_from_no_name() -> None:
    with dns_server() as (records, port):
        records.set(NAME, ["10.1.0.7", "fd00::7"])
        found = asyncio.run(resolve_urls(DnsTarget(NAME, 8000, "127.0.0.1", port)))
        assert found == {"http://10.1.0.7:8000", "http://[fd00::7]:8000"}
        absent = asyncio.run(resolve_urls(DnsTarget("gone.svc", 8000, "127.0.0.1", port)))
        assert absent == set()  # NXDOMAIN: no replicas
    # a nameserver that does not answer is not an empty answer: the known replicas stay
    assert asyncio.run(resolve_urls(DnsTarget(NAME, 8000, "127.0.0.1", port))) is None


def test_bad_dns_flags_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--upstream-dns", "vllm-headless", "--kv-budget-tokens", "1000"]) == 2
    err = capsys.readouterr().err.strip()
    assert "give NAME:PORT" in err and "\n" not in err
    argv = ["serve", "--upstream-dns", f"{NAME}:8000", "--dns-server", "dns.local"]
    assert main(argv) == 2
    assert "nameserver's IP address" in capsys.readouterr().err


def test_kvwise_serve_learns_its_limits_from_a_replica_the_name_resolves_to(
    tmp_path: Path,
) -> None:
    address, port = "127.0.0.2", free_port()
    with dns_server() as (records, dns_port), fakes_on([address], port) as fakes:
        fakes[address].behaviour.pool_tokens = 48_000
        fakes[address].behaviour.max_model_len = 3000
        records.set(NAME, [address])
        args = ["--upstream-dns", f"{NAME}:{port}", "--dns-server", f"127.0.0.1:{dns_port}",
                "--admin-key", "admin-key"]  # fmt: skip
        with kvwise_serve(args, tmp_path) as (url, limits):
            assert limits["replicas"] == []  # none named: found by DNS
            assert limits["replicas_from_dns"] == {
                "name": f"{NAME}:{port}", "interval_s": 5.0, "kv_budget_tokens": 48_000
            }  # fmt: skip
            assert limits["max_model_len"] == 3000  # read from the replica the name gave
            rows = httpx.get(f"{url}/kvwise/replicas", headers=ADMIN).json()["replicas"]
            assert [(r["url"], r["state"], r["source"]) for r in rows] == [
                (f"http://{address}:{port}", "serving", "dns")
            ]
            assert httpx.post(f"{url}/v1/chat/completions", json=CHAT).status_code == 200


def test_draining_one_replica_moves_only_its_own_keys() -> None:
    replicas = [Replica(f"r{i}", f"http://10.0.0.{i}:8000", 10_000) for i in range(3)]
    router = Router(replicas)
    keys = [f"session:open/s{i}" for i in range(300)]
    before = {key: router.pick(key, 100) for key in keys}
    replicas[1].is_draining = True
    router.rebuild(replicas)
    after = {key: router.pick(key, 100) for key in keys}
    moved = {key for key in keys if after[key] is not before[key]}
    assert moved == {key for key in keys if before[key] is replicas[1]}
    assert 50 < len(moved) < 150  # about a third
    assert replicas[1] not in after.values()


def test_a_nameserver_that_does_not_answer_does_not_slow_the_health_checks() -> None:
    silent_port = free_port()  # nothing answers there: each resolution waits out its 2 s twice
    with fakes_on(["127.0.0.2"], free_port()) as fakes:
        (address, fake), = fakes.items()  # fmt: skip
        url = f"http://{address}:{fake.server.port if fake.server else 0}"
        target = DnsTarget(NAME, 8000, "127.0.0.1", silent_port)
        config = make_config([url], membership=MembershipConfig(100_000, None, target, 0.2),
                             health_timeout_s=0.3, health_failures=1)  # fmt: skip
        with running_gateway(config) as gw:
            assert httpx.get(f"{gw.url}/health").status_code == 200
            fake.behaviour.is_hung = True  # the engine stops answering
            started = time.monotonic()
            assert wait_until(lambda: httpx.get(f"{gw.url}/health").status_code == 503, 10)
            # seen at a health tick (0.2 s + a 0.3 s probe), not after the ~4 s resolution
            assert time.monotonic() - started < 2.0
            fake.behaviour.is_hung = False
