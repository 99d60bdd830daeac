"""Fuzzing the HTTP surface with hypothesis: whatever a client sends, never a 5xx.

The upstream is a fake (not an engine): the property is about the gateway's own handling of
bodies, headers and paths, and thousands of requests must run in seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fake_upstream import Behaviour
from tests.gateway.servers import (
    RunningGateway,
    fake_upstreams,
    make_config,
    running_gateway,
    session_config,
)

# text with lone UTF-16 surrogates too (category Cs): JSON can carry them as \ud800 escapes
TEXT = st.text(max_size=30) | st.text(st.characters(categories=["Cs", "L", "N"]), max_size=8)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
ROLES = st.sampled_from(["system", "user", "assistant", "tool", "developer", "robot", ""])
MESSAGE = st.fixed_dictionaries(
    {"role": ROLES},
    optional={"content": JSON, "tool_calls": JSON, "tool_call_id": JSON, "name": JSON},
)
CHAT_BODY = st.fixed_dictionaries(
    {},
    optional={
        "model": JSON | st.just("fake"),
        "messages": st.lists(MESSAGE, max_size=4) | JSON,
        # small or past max_model_len: the fake upstream streams every token asked for
        "max_tokens": st.integers(-5, 40) | st.sampled_from([2048, 5000]) | JSON,
        "max_completion_tokens": st.integers(-5, 100) | JSON,
        "n": st.integers(-1, 20) | JSON,
        "stream": st.booleans() | JSON,
        "stream_options": JSON,
        "user": st.text(max_size=20) | JSON,
        "tools": JSON,
        "prompt": JSON | st.lists(st.integers(-3, 3000), max_size=5),
        "best_of": JSON,
        "temperature": JSON,
    },
)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    store = str(tmp_path_factory.mktemp("fuzz") / "sessions.sqlite3")
    with fake_upstreams(Behaviour()) as ups:
        config = make_config([ups[0][0]], budget_tokens=50_000, sessions=session_config(store))
        with running_gateway(config) as running:
            yield running


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=CHAT_BODY,
    path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]),
    session=st.text(max_size=8),
)
def test_no_body_makes_a_5xx(
    gateway: RunningGateway, body: dict[str, Any], path: str, session: str
) -> None:
    is_header_safe = session == session.strip() and session.isprintable() and session.isascii()
    headers = {"x-session-id": session} if session and is_header_safe else {}
    raw = json.dumps(body).encode()  # ASCII escapes: a lone surrogate travels as \udXXX
    headers["content-type"] = "application/json"
    response = httpx.post(f"{gateway.url}{path}", content=raw, headers=headers, timeout=30)
    assert response.status_code < 500, (response.status_code, response.text[:300])
    if response.status_code >= 400:
        assert "message" in response.json()["error"]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    raw=st.binary(max_size=300)
    | JSON.map(lambda v: json.dumps(v).encode())
    | st.integers(1, 50_000).map(lambda depth: b"[" * depth + b"]" * depth),
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
    path=st.sampled_from(
        ["/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/x"]
    ),
    content_type=st.sampled_from(["application/json", "text/plain", "", "multipart/form-data"]),
)
def test_no_bytes_method_or_path_makes_a_5xx(
    gateway: RunningGateway, raw: bytes, method: str, path: str, content_type: str
) -> None:
    response = httpx.request(
        method, f"{gateway.url}{path}", content=raw, headers={"content-type": content_type}
    )
    assert response.status_code < 500, (response.status_code, response.text[:300])
