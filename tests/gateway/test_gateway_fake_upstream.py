"""The gateway against fake upstreams (not an engine): failure injection at exact points, auth,
caps and rate limits. The real engine's behaviour is covered by the *_e2e tests."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import time
import weakref
from collections.abc import Iterator

import httpx
from prometheus_client.parser import text_string_to_metric_families

from kvwise.gateway.config import SecurityConfig
from tests.fake_upstream import Behaviour, FakeUpstream
from tests.gateway.servers import (
    LoopThread,
    fake_upstreams,
    make_config,
    running_gateway,
    tokens_before_a_mid_stream_failure,
    wait_until,
)

CHAT = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def test_a_replica_that_fails_before_the_first_token_is_replaced_silently() -> None:
    with fake_upstreams(
        Behaviour(drop_after_tokens=0), Behaviour(drop_after_tokens=0), Behaviour()
    ) as ups:
        config = make_config([url for url, _ in ups])
        with running_gateway(config) as gw:
            for stream in (False, True):
                for i in range(6):  # different sessions: some land on the failing replicas first
                    body = {**CHAT, "stream": stream, "user": f"s{i}"}
                    response = httpx.post(f"{gw.url}/v1/chat/completions", json=body)
                    assert response.status_code == 200
                    assert response.headers["x-kvwise-replica"] == "r2"
                    assert "t4" in response.text and "error" not in response.text
            assert gw.gateway.metrics.failovers.get() >= 1
            assert wait_until(lambda: [r.reserved_tokens for r in gw.gateway.replicas] == [0, 0, 0])


def test_a_replica_that_fails_mid_stream_ends_it_with_a_clean_error() -> None:
    with (
        fake_upstreams(Behaviour(drop_after_tokens=2)) as ups,
        running_gateway(make_config([ups[0][0]])) as gw,
    ):
        assert tokens_before_a_mid_stream_failure(gw.url, CHAT) == ["", "t0 ", "t1 "]
        assert gw.gateway.metrics.broken_streams.get() == 1
        assert wait_until(lambda: gw.gateway.replicas[0].reserved_tokens == 0)


def test_a_client_that_leaves_mid_stream_frees_its_budget_and_its_upstream() -> None:
    with (
        fake_upstreams(Behaviour(ttft_s=0.01, itl_s=0.02)) as ups,
        running_gateway(make_config([ups[0][0]])) as gw,
    ):
        body = {**CHAT, "max_tokens": 500, "stream": True}
        with httpx.stream("POST", f"{gw.url}/v1/chat/completions", json=body) as stream:
            lines = stream.iter_lines()
            assert any('"t3 "' in line for line in lines)  # well past the first token
            assert gw.gateway.replicas[0].reserved_tokens > 0
        # the client is gone 490-odd tokens early: its reservation, and the upstream's work
        assert wait_until(lambda: gw.gateway.replicas[0].reserved_tokens == 0, timeout_s=5)
        assert wait_until(lambda: ups[0][1].num_running == 0, timeout_s=5)
        assert wait_until(lambda: gw.gateway.metrics.disconnects.get() == 1, timeout_s=5)


def test_a_client_that_reads_slowly_gets_the_whole_stream_in_order() -> None:
    """A client that does not read for a while: once the sockets' buffers are full the relay
    must hold the stream back (and the upstream with it), not drop or reorder events."""
    num_tokens = 40_000  # 5.6 MB of events: more than the kernel buffers take (4 MB at most)
    with (
        fake_upstreams(Behaviour()) as ups,
        running_gateway(make_config([ups[0][0]], max_model_len=50_000)) as gw,
    ):
        body = json.dumps({**CHAT, "max_tokens": num_tokens, "stream": True}).encode()
        host, port = gw.url.removeprefix("http://").split(":")
        with socket.socket() as client:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting
            client.connect((host, int(port)))
            client.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (len(body), body)
            )
            time.sleep(1.0)  # the upstream has sent everything by now; the client read nothing
            received = b""
            while not received.endswith(b"\r\n0\r\n\r\n"):
                data = client.recv(65536)
                assert data, "closed before the end of the stream"
                received += data
    head, _, framed = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head
    events = b"".join(_dechunk(framed)).decode().split("\n\n")
    lines = [event for event in events if event.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    contents = [json.loads(line[6:])["choices"][0]["delta"]["content"] for line in lines[1:-1]]
    assert contents == [f"t{i} " for i in range(num_tokens)]


def test_streamed_replies_on_one_kept_alive_connection_are_whole_http_messages() -> None:
    """The head and the first events leave in one write, past uvicorn's `send`: the head must
    still be uvicorn's (date, server), framed for keep-alive, and the next request on the same
    connection answered the same way."""
    with (
        fake_upstreams(Behaviour(itl_s=0.002)) as ups,
        running_gateway(make_config([ups[0][0]])) as gw,
    ):
        body = json.dumps({**CHAT, "max_tokens": 3, "stream": True}).encode()
        host, port = gw.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as client:
            for _ in range(2):
                client.sendall(
                    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                    b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                    % (len(body), body)
                )
                received = b""
                while not received.endswith(b"\r\n0\r\n\r\n"):
                    data = client.recv(65536)
                    assert data, "the gateway closed the kept-alive connection"
                    received += data
                head, _, framed = received.partition(b"\r\n\r\n")
                status, *lines = head.decode().split("\r\n")
                headers = dict(line.split(": ", 1) for line in lines)
                assert status == "HTTP/1.1 200 OK"
                assert {"date", "server", "x-kvwise-replica"} <= headers.keys()
                assert headers["content-type"] == "text/event-stream"
                assert headers["transfer-encoding"] == "chunked"
                assert "connection" not in headers  # kept alive
                events = b"".join(_dechunk(framed)).decode().split("\n\n")
                assert [e for e in events if e][-1] == "data: [DONE]"
                assert sum('"content": "t' in e for e in events) == 3


def test_the_last_event_and_the_end_of_the_stream_leave_in_one_write() -> None:
    """[DONE] and the terminating chunk the engine sends with it go to the client in one
    write (one TCP segment), not two: a client that has read [DONE] has the whole response,
    and the connection is free for its next request, without waiting for one more packet.
    The client reads each piece as it arrives, so two writes would come as two reads. Short
    replies (every token in the engine's first write) and longer ones, on one connection."""
    with (
        fake_upstreams(Behaviour(ttft_s=0.05)) as ups,
        running_gateway(make_config([ups[0][0]])) as gw,
    ):
        host, port = gw.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as client:
            for i in range(6):
                is_short = i % 2 == 0
                ups[0][1].behaviour.itl_s = 0.0 if is_short else 0.005
                body = json.dumps({**CHAT, "max_tokens": 2 if is_short else 5, "stream": True})
                client.sendall(
                    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                    b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                    % (len(body), body.encode())
                )
                reads: list[bytes] = []
                while not b"".join(reads).endswith(b"\r\n0\r\n\r\n"):
                    data = client.recv(65536)
                    assert data, "the gateway closed the kept-alive connection"
                    reads.append(data)
                last = next(read for read in reads if b"data: [DONE]" in read)
                assert last.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"), reads[-2:]


def _dechunk(framed: bytes) -> Iterator[bytes]:
    """The body of an HTTP/1.1 chunked message (no extensions, no trailers)."""
    while True:
        size_line, _, framed = framed.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return
        yield framed[:size]
        framed = framed[size + 2 :]


def test_an_upstream_500_is_retried_elsewhere_and_relayed_when_nowhere_is_left() -> None:
    with (
        fake_upstreams(Behaviour(status=500), Behaviour()) as ups,
        running_gateway(make_config([url for url, _ in ups])) as gw,
    ):
        for i in range(4):
            response = httpx.post(f"{gw.url}/v1/chat/completions", json={**CHAT, "user": f"s{i}"})
            assert (response.status_code, response.headers["x-kvwise-replica"]) == (200, "r1")
        ups[1][1].behaviour.status = 500
        response = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT)
        assert response.status_code == 502
        assert response.json()["error"]["type"] == "upstream_error"


def test_api_keys_body_cap_and_rate_limit() -> None:
    security = SecurityConfig(
        api_keys=("sk-good",), max_body_bytes=2000, rate_limit_rps=0.01, rate_limit_burst=2
    )
    with (
        fake_upstreams(Behaviour()) as ups,
        running_gateway(make_config([ups[0][0]], security=security)) as gw,
    ):
        url = f"{gw.url}/v1/chat/completions"
        good = {"authorization": "Bearer sk-good"}
        assert httpx.post(url, json=CHAT).status_code == 401
        assert (
            httpx.post(url, json=CHAT, headers={"authorization": "Bearer sk-bad"}).status_code
            == 401
        )
        assert httpx.get(f"{gw.url}/v1/models").status_code == 401
        big = {**CHAT, "messages": [{"role": "user", "content": "x" * 3000}]}
        assert httpx.post(url, json=big, headers=good).status_code == 413
        assert httpx.post(url, json=CHAT, headers=good).status_code == 200  # 2nd of a burst of 2
        limited = httpx.post(url, json=CHAT, headers=good)
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert httpx.get(f"{gw.url}/health").status_code == 200  # open, like vLLM's


def test_unknown_fields_reach_the_engine_and_bad_ones_get_a_400_naming_the_field() -> None:
    with fake_upstreams(Behaviour()) as ups, running_gateway(make_config([ups[0][0]])) as gw:
        url = f"{gw.url}/v1/chat/completions"
        response = httpx.post(
            url, json={**CHAT, "ignore_eos": True, "response_format": {"type": "text"}}
        )
        assert response.status_code == 200
        refused = httpx.post(url, json={**CHAT, "max_tokens": -3})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "max_tokens"
        assert httpx.post(url, content=b"{not json").status_code == 400
        completions = httpx.post(
            f"{gw.url}/v1/completions", json={"model": "fake", "prompt": [1, 2, 3]}
        )
        assert completions.status_code == 200 and completions.json()["choices"][0][
            "text"
        ].startswith("t0")


def test_metrics_show_queue_budget_latency_and_token_timing() -> None:
    with (
        fake_upstreams(Behaviour(ttft_s=0.01, itl_s=0.002)) as ups,
        running_gateway(make_config([ups[0][0]], budget_tokens=5000)) as gw,
    ):
        httpx.post(f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": True})
        text = httpx.get(f"{gw.url}/metrics").text
    # read as Prometheus reads it (its own parser): names, labels, values
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("kvwise_kv_budget_tokens", (("replica", "r0"),))] == 5000
    assert samples[("kvwise_requests_admitted_total", ())] == 1
    assert samples[("kvwise_queue_depth", ())] == 0
    assert samples[("kvwise_http_responses_total", (("code", "200"),))] == 1
    assert samples[("kvwise_ttft_seconds_count", ())] == 1
    assert samples[("kvwise_tpot_seconds_count", ())] == 1
    assert samples[("kvwise_request_duration_seconds_count", (("replica", "r0"),))] == 1


def test_a_closing_usage_chunk_does_not_count_as_a_token() -> None:
    """vLLM's `include_usage` chunk carries no token: the TPOT spreads over the tokens only."""
    with (
        # gaps long enough that a busy machine's scheduling delay cannot blur 200 vs 160 ms
        fake_upstreams(Behaviour(ttft_s=0.01, itl_s=0.2)) as ups,
        running_gateway(make_config([ups[0][0]])) as gw,
    ):
        body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
        response = httpx.post(f"{gw.url}/v1/chat/completions", json=body)
        assert '"choices":[]' in response.text  # relayed to the client all the same
        lines = httpx.get(f"{gw.url}/metrics").text.splitlines()
    [tpot_sum] = [
        float(line.split()[1]) for line in lines if line.startswith("kvwise_tpot_seconds_sum")
    ]
    assert 0.18 <= tpot_sum <= 0.3  # 4 gaps of 200 ms between 5 tokens; counted: 160 ms


def test_with_every_replica_down_requests_get_503_until_one_is_back() -> None:
    """Failure injection (the fake upstream stops and restarts on its port)."""
    loop = LoopThread()
    upstream = FakeUpstream(Behaviour())
    try:
        port = loop.run(upstream.start())
        with running_gateway(make_config([f"http://127.0.0.1:{port}"])) as gw:
            url = f"{gw.url}/v1/chat/completions"
            assert httpx.post(url, json=CHAT).status_code == 200
            loop.run(upstream.stop())
            assert wait_until(lambda: not gw.gateway.replicas[0].is_healthy)
            refused = httpx.post(url, json=CHAT)
            assert refused.status_code == 503
            assert int(refused.headers["retry-after"]) >= 1
            assert "no healthy replica" in refused.json()["error"]["message"]
            assert httpx.get(f"{gw.url}/health").status_code == 503
            loop.run(upstream.start(port=port))  # back on the same address
            assert wait_until(lambda: gw.gateway.replicas[0].is_healthy)
            assert httpx.post(url, json=CHAT).status_code == 200
    finally:
        loop.run(upstream.stop())
        loop.close()


def test_start_up_frees_garbage_before_freezing_what_start_up_made() -> None:
    """The gateway freezes its start-up objects out of the collector's sight; garbage lying
    around at that moment must be freed first, not kept for the life of the process."""

    class Node:
        pass

    gc.disable()  # no automatic collection may free it by chance while the gateway starts
    try:
        garbage = Node()
        garbage.self = garbage  # type: ignore[attr-defined]  # a cycle: only the collector frees it
        is_alive = weakref.ref(garbage)
        del garbage
        with fake_upstreams(Behaviour()) as ups, running_gateway(make_config([ups[0][0]])):
            assert is_alive() is None
            assert gc.get_freeze_count() > 0
    finally:
        gc.enable()


def test_one_session_filling_the_queue_does_not_keep_a_newcomer_out() -> None:
    """One request runs at a time (budget); an agent queues 4 more, filling the queue; a
    newcomer is still queued and served, and the agent's newest request is the one refused.
    Each request is sent once the gateway's /metrics shows the one before it running or
    queued, so the order holds however slow the machine is (sleeps did not, under load)."""
    with fake_upstreams(Behaviour(ttft_s=1.0)) as ups:
        config = make_config([ups[0][0]], budget_tokens=1, max_queue=4)
        with running_gateway(config) as gw:

            async def gauge(api: httpx.AsyncClient, name: str) -> float:
                text = (await api.get("/metrics")).text
                for family in text_string_to_metric_families(text):
                    for sample in family.samples:
                        if sample.name == name and not sample.labels:
                            return sample.value
                raise AssertionError(f"{name} not in /metrics")

            async def until(api: httpx.AsyncClient, name: str, value: float) -> None:
                deadline = asyncio.get_running_loop().time() + 20
                while await gauge(api, name) < value:
                    assert asyncio.get_running_loop().time() < deadline, (name, value)
                    await asyncio.sleep(0.01)

            async def ask(api: httpx.AsyncClient, session: str) -> int:
                headers = {"x-session-id": session}
                response = await api.post("/v1/chat/completions", json=CHAT, headers=headers)
                return response.status_code

            async def scenario() -> list[int]:
                async with httpx.AsyncClient(base_url=gw.url, timeout=30) as api:
                    sent = [asyncio.create_task(ask(api, "agent"))]
                    await until(api, "kvwise_requests_admitted_total", 1)
                    for queued in range(1, 5):
                        sent.append(asyncio.create_task(ask(api, "agent")))
                        await until(api, "kvwise_queue_depth", queued)
                    sent.append(asyncio.create_task(ask(api, "newcomer")))
                    return list(await asyncio.gather(*sent))

            statuses = asyncio.run(scenario())
        assert statuses == [200, 200, 200, 200, 429, 200]


def test_end_to_end_headers_reach_the_engine_and_hop_by_hop_ones_and_the_key_do_not() -> None:
    with fake_upstreams(Behaviour()) as ups:
        config = make_config(
            [ups[0][0]],
            security=SecurityConfig(api_keys=("sk-client",)),
            upstream_api_key="sk-engine",
        )
        with running_gateway(config) as gw:
            sent = {
                "authorization": "Bearer sk-client",
                "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                "x-request-id": "req-7",
                "x-team": "search",
                "connection": "keep-alive, x-hop",
                "x-hop": "one connection only",
                "proxy-authorization": "Basic abc",
                "te": "trailers",
                "accept-encoding": "gzip",
            }
            for stream in (False, True):
                response = httpx.post(
                    f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": stream}, headers=sent
                )
                assert response.status_code == 200
                received = ups[0][1].last_headers
                assert received["traceparent"] == sent["traceparent"]
                assert (received["x-request-id"], received["x-team"]) == ("req-7", "search")
                assert received["authorization"] == "Bearer sk-engine"
                for hop in ("x-hop", "proxy-authorization", "te", "accept-encoding", "keep-alive"):
                    assert hop not in received, hop
                assert received.get("connection", "keep-alive") == "keep-alive"  # the relay's own
