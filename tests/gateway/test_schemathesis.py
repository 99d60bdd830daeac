"""schemathesis against the gateway's own OpenAPI document (/openapi.json): requests that fit the
schema and requests that break it (negative mode), headers included; none may get a 5xx.

The gateway runs for real (uvicorn, sockets) with API keys and session history on. The upstream
is a fake (not an engine): the property is about the gateway's handling of what clients send,
and hundreds of requests must run in seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from kvwise.gateway.config import SecurityConfig
from kvwise.gateway.fake_upstream import Behaviour
from tests.gateway.servers import (
    RunningGateway,
    fake_upstreams,
    make_config,
    running_gateway,
    session_config,
)

KEY = "sk-fuzz-0123456789abcdef"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    folder = tmp_path_factory.mktemp("schemathesis")
    keys = folder / "keys.yaml"
    keys.write_text(f"keys:\n  - name: fuzz\n    key: {KEY}\n")
    security = SecurityConfig(api_keys_file=str(keys), max_body_bytes=64 * 2**10)
    sessions = session_config(str(Path(folder) / "sessions.sqlite3"))
    with fake_upstreams(Behaviour()) as ups:
        config = make_config([ups[0][0]], budget_tokens=50_000, sessions=sessions)
        with running_gateway(config.__class__(**{**config.__dict__, "security": security})) as gw:
            yield gw


@pytest.fixture(scope="module")
def cases(gateway: RunningGateway) -> st.SearchStrategy[schemathesis.Case]:
    """Cases for every operation of the document the gateway serves, fitting it or not."""
    schema = schemathesis.openapi.from_url(f"{gateway.url}/openapi.json")
    modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    return st.one_of(*(schema.as_strategy(generation_mode=mode) for mode in modes))


# schemathesis' pytest plugin (`from_fixture`) reads a private pytest attribute that pytest 9
# removed; its hypothesis strategies are the same cases, drawn here
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_no_request_the_schema_describes_or_breaks_gets_a_5xx(
    gateway: RunningGateway, cases: st.SearchStrategy[schemathesis.Case], data: st.DataObject
) -> None:
    case = data.draw(cases)
    # the key is not what is fuzzed here (tests/gateway/test_auth.py): wrong keys would only
    # get the address throttled (429) and keep every later body from being looked at
    case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
    case.headers["Authorization"] = f"Bearer {KEY}"
    response = case.call(base_url=gateway.url, timeout=30)
    assert response.status_code < 500, (response.status_code, response.text[:300], case.body)
    if response.status_code >= 400 and case.path.startswith("/v1/"):
        assert "message" in response.json()["error"]  # OpenAI's error shape
