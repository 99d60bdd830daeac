"""Hostile bodies get a 4xx in OpenAI's error shape; the gateway's own failures a counted,
logged 500 with a request id. The upstream is a fake (not an engine)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fake_upstream import Behaviour
from tests.gateway.servers import (
    RunningGateway,
    fake_upstreams,
    make_config,
    running_gateway,
    session_config,
)

CHAT = b'"model":"m","messages":[{"role":"user","content":"x"}]'
ATTACKS = {
    "lone surrogate in content": b'{"model":"m","messages":[{"role":"user","content":"\\ud800"}]}',
    "lone surrogate, low half": b'{"model":"m","messages":[{"role":"user","content":"a\\uDFFFb"}]}',
    "lone surrogate in user": b'{"user":"\\ud800",' + CHAT + b"}",
    "lone surrogate in a key": b'{"\\udc00":1,' + CHAT + b"}",
    "lone surrogate, streamed": b'{"stream":true,"model":"m","messages":[{"role":"user","content":"\\ud800"}]}',
    "deeply nested array": b"{" + CHAT + b',"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "deeply nested, unterminated": b"[" * 100_000,
    "nested past pydantic": b"{"
    + CHAT
    + b',"tools":['
    + b'{"a":' * 3000
    + b"1"
    + b"}" * 3000
    + b"]}",
    "huge float": b"{" + CHAT + b',"max_tokens":1e400}',
    "huge integer": b"{" + CHAT + b',"max_tokens":' + b"9" * 5000 + b"}",
    "huge n": b"{" + CHAT + b',"n":99999999999999999999999}',
    "NaN": b"{" + CHAT + b',"max_tokens":NaN}',
    "invalid UTF-8": b'{"model":"m","messages":[{"role":"user","content":"\xff\xfe"}]}',
    "messages of the wrong type": b'{"model":"m","messages":{"role":"user"}}',
    "stream of the wrong type": b'{"stream":[1],' + CHAT + b"}",
}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    store = str(tmp_path_factory.mktemp("hostile") / "s.sqlite3")
    with fake_upstreams(Behaviour()) as ups:
        config = make_config([ups[0][0]], sessions=session_config(store))
        with running_gateway(config) as gw:
            yield gw


@pytest.mark.parametrize("name", ATTACKS)
@pytest.mark.parametrize("session", [None, "s1"])
def test_hostile_bodies_get_a_4xx_in_openai_shape(
    gw: RunningGateway, name: str, session: str | None
) -> None:
    headers = {"content-type": "application/json"} | ({"x-session-id": session} if session else {})
    response = httpx.post(
        f"{gw.url}/v1/chat/completions", content=ATTACKS[name], headers=headers, timeout=30
    )
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:200])
    error = response.json()["error"]
    assert error["message"] and error["type"] == "invalid_request_error"


def test_a_paired_surrogate_escape_is_text_not_an_attack(gw: RunningGateway) -> None:
    emoji = b'{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"\\ud83d\\ude00"}]}'
    response = httpx.post(
        f"{gw.url}/v1/chat/completions", content=emoji, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200


class _Broken:
    def count(self, text: str) -> int:
        raise RuntimeError("a bug")


def test_the_gateways_own_failure_is_a_counted_logged_500_with_a_request_id(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with fake_upstreams(Behaviour()) as ups, running_gateway(make_config([ups[0][0]])) as gw:
        gw.gateway.tokenizer = _Broken()  # type: ignore[assignment]
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        with caplog.at_level(logging.ERROR, logger="kvwise.gateway"):
            traced = httpx.post(
                f"{gw.url}/v1/chat/completions", json=body, headers={"x-request-id": "req-42"}
            )
            untraced = httpx.post(f"{gw.url}/v1/chat/completions", json=body)
        assert (traced.status_code, untraced.status_code) == (500, 500)
        assert traced.json()["error"]["type"] == "internal_error"
        assert "req-42" in traced.json()["error"]["message"]
        assert traced.headers["x-request-id"] == "req-42"
        generated = untraced.headers["x-request-id"]
        logged = " ".join(r.getMessage() for r in caplog.records)
        assert "req-42" in logged and generated in logged
        metrics = httpx.get(f"{gw.url}/metrics").text
        assert 'kvwise_http_responses_total{code="500"} 2' in metrics
