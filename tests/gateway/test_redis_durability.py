"""Redis persists as configured: the gateway reads that at start and says when acknowledged
turns can be lost (a real redis-server of the test's own, reconfigured as it goes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from kvwise.cli import main
from kvwise.gateway.redis_store import durability_problem
from tests.engine_fixture import RedisProcess
from tests.fake_upstream import Behaviour
from tests.gateway.servers import fake_upstreams

pytestmark = pytest.mark.redis


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(log_path=tmp_path / "redis.log").start()  # appendonly no
    try:
        yield server
    finally:
        server.stop()


def test_each_persistence_setting_is_named_with_what_it_can_lose(
    private_redis: RedisProcess,
) -> None:
    problem = durability_problem(private_redis.url)
    assert problem is not None and "appendonly is off" in problem
    client = redis.Redis.from_url(private_redis.url)
    client.config_set("appendonly", "yes")  # Redis's default fsync with AOF: everysec
    problem = durability_problem(private_redis.url)
    assert problem is not None and "appendfsync is everysec" in problem
    client.config_set("appendfsync", "always")
    assert durability_problem(private_redis.url) is None
    client.close()
    private_redis.stop()
    problem = durability_problem(private_redis.url, timeout_s=1)
    assert problem is not None and "not answering" in problem


def test_serve_refuses_a_lossy_redis_when_asked_to(
    private_redis: RedisProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    with fake_upstreams(Behaviour()) as ups:
        args = ["serve", "--upstream", ups[0][0], "--session-store", private_redis.url]
        assert main([*args, "--session-store-durable"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "appendonly is off" in err[0], err
