"""schemathesis against the gateway's own OpenAPI document (/openapi.json): requests that fit the
schema and requests that break it (negative mode), headers included; none may get a 5xx.

The gateway runs for real (uvicorn, sockets) with API keys and session history on, once in
front of a fake upstream (not an engine: the gateway's own handling, hundreds of cases in
seconds) and once in front of the real vLLM CPU engine (what the engine makes of what passes).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from kvwise.gateway.config import GatewayConfig, SecurityConfig
from tests.engine_fixture import SERVED_MODEL_NAME, EngineProcess, tiny_model_dir
from tests.fake_upstream import Behaviour
from tests.gateway.servers import (
    RunningGateway,
    fake_upstreams,
    make_config,
    running_gateway,
    session_config,
)

KEY = "sk-fuzz-0123456789abcdef"


def gateway_config(folder: Path, url: str, **changes: Any) -> GatewayConfig:
    keys = folder / "keys.yaml"
    keys.write_text(f"keys:\n  - name: fuzz\n    key: {KEY}\n")
    security = SecurityConfig(api_keys_file=str(keys), max_body_bytes=64 * 2**10)
    sessions = session_config(str(folder / "sessions.sqlite3"))
    return make_config([url], sessions=sessions, security=security, **changes)


def all_cases(gateway: RunningGateway) -> st.SearchStrategy[schemathesis.Case]:
    """Cases for every operation of the document the gateway serves, fitting it or not."""
    schema = schemathesis.openapi.from_url(f"{gateway.url}/openapi.json")
    modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    return st.one_of(*(schema.as_strategy(generation_mode=mode) for mode in modes))


def call_without_5xx(gateway: RunningGateway, case: schemathesis.Case) -> int:
    # the key is not what is fuzzed here (tests/gateway/test_auth.py): wrong keys would only
    # get the address throttled (429) and keep every later body from being looked at
    case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
    case.headers["Authorization"] = f"Bearer {KEY}"
    response = case.call(base_url=gateway.url, timeout=120)
    assert response.status_code < 500, (response.status_code, response.text[:300], case.body)
    if response.status_code >= 400 and case.path.startswith("/v1/"):
        assert "message" in response.json()["error"]  # OpenAI's error shape
    return int(response.status_code)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    """In front of a fake upstream: the gateway's own handling, hundreds of cases in seconds."""
    folder = tmp_path_factory.mktemp("schemathesis")
    with (
        fake_upstreams(Behaviour()) as ups,
        running_gateway(gateway_config(folder, ups[0][0], budget_tokens=50_000)) as gw,
    ):
        yield gw


@pytest.fixture(scope="module")
def cases(gateway: RunningGateway) -> st.SearchStrategy[schemathesis.Case]:
    return all_cases(gateway)


# schemathesis' pytest plugin (`from_fixture`) reads a private pytest attribute that pytest 9
# removed; its hypothesis strategies are the same cases, drawn here
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_no_request_the_schema_describes_or_breaks_gets_a_5xx(
    gateway: RunningGateway, cases: st.SearchStrategy[schemathesis.Case], data: st.DataObject
) -> None:
    call_without_5xx(gateway, data.draw(cases))


@pytest.fixture(scope="module")
def engine_gateway(
    vllm_engine: EngineProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    """In front of the real vLLM CPU engine: what passes the gateway reaches an engine that
    may refuse it in its own way. max_model_len 96 keeps every generation short."""
    folder = tmp_path_factory.mktemp("schemathesis-engine")
    config = gateway_config(
        folder, vllm_engine.url, max_model_len=96, tokenizer_path=str(tiny_model_dir())
    )
    with running_gateway(config) as gw:
        yield gw


@pytest.fixture(scope="module")
def engine_cases(engine_gateway: RunningGateway) -> st.SearchStrategy[schemathesis.Case]:
    return all_cases(engine_gateway)


@pytest.mark.engine
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_in_front_of_the_engine_no_request_gets_a_5xx(
    engine_gateway: RunningGateway,
    engine_cases: st.SearchStrategy[schemathesis.Case],
    data: st.DataObject,
) -> None:
    case = data.draw(engine_cases)
    if isinstance(case.body, dict) and isinstance(case.body.get("model"), str):
        case.body["model"] = SERVED_MODEL_NAME  # else nearly every case is the engine's 404
    call_without_5xx(engine_gateway, case)
