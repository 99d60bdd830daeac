"""Authentication as a client sees it: the scheme's case, throttled guessing, what /health and
/metrics show to whom. The upstream is a fake (not an engine)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from kvwise.gateway.config import SecurityConfig
from tests.fake_upstream import Behaviour
from tests.gateway.servers import (
    RunningGateway,
    fake_upstreams,
    make_config,
    running_gateway,
    wait_until,
)

CHAT = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture
def gw() -> Iterator[RunningGateway]:
    security = SecurityConfig(api_keys=("sk-user",), admin_keys=("sk-admin",), max_auth_failures=3)
    with (
        fake_upstreams(Behaviour()) as ups,
        running_gateway(make_config([ups[0][0]], security=security)) as gw,
    ):
        yield gw


def post(gw: RunningGateway, authorization: str) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/chat/completions", json=CHAT, headers={"authorization": authorization}
    )


def test_the_bearer_scheme_is_case_insensitive(gw: RunningGateway) -> None:
    for scheme in ("Bearer", "bearer", "BEARER"):
        assert post(gw, f"{scheme} sk-user").status_code == 200
    with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-user", max_retries=0) as api:
        assert api.chat.completions.create(**CHAT).choices  # type: ignore[call-overload]


def test_guessing_keys_from_one_address_is_throttled(gw: RunningGateway) -> None:
    assert [post(gw, f"Bearer sk-guess-{i}").status_code for i in range(3)] == [401] * 3
    throttled = post(gw, "Bearer sk-guess-3")
    assert throttled.status_code == 429
    assert int(throttled.headers["retry-after"]) > 0
    assert throttled.json()["error"]["type"] == "rate_limit_exceeded"
    # the address is not even checked now: a right guess would be no use
    assert post(gw, "Bearer sk-user").status_code == 429


def test_health_says_up_to_anyone_and_details_to_admins(gw: RunningGateway) -> None:
    assert httpx.get(f"{gw.url}/health").json() == {"status": "ok"}
    for _ in range(5):  # an API key is not an admin key, and polling with it locks nothing
        user = httpx.get(f"{gw.url}/health", headers={"authorization": "Bearer sk-user"})
        assert user.json() == {"status": "ok"}
    wrong = httpx.get(f"{gw.url}/health", headers={"authorization": "Bearer sk-guess"})
    assert wrong.status_code == 401
    admin = httpx.get(f"{gw.url}/health", headers={"authorization": "Bearer sk-admin"}).json()
    assert admin["replicas"]["r0"]["url"].startswith("http://127.0.0.1:")
    assert httpx.get(f"{gw.url}/metrics").status_code == 401
    metrics = httpx.get(f"{gw.url}/metrics", headers={"authorization": "Bearer sk-admin"})
    assert "kvwise_queue_depth" in metrics.text


def test_a_key_revoked_in_the_keys_file_stops_working_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("sk-alice\nsk-bob\n")
    security = SecurityConfig(api_keys_file=str(path))
    with (
        fake_upstreams(Behaviour()) as ups,
        running_gateway(make_config([ups[0][0]], security=security)) as gw,
    ):
        assert post(gw, "Bearer sk-bob").status_code == 200
        path.write_text("sk-alice\n")
        assert wait_until(lambda: post(gw, "Bearer sk-bob").status_code == 401, timeout_s=5)
        assert post(gw, "Bearer sk-alice").status_code == 200
