from __future__ import annotations

from pathlib import Path

import pytest

from kvwise.errors import UsageError
from kvwise.gateway.security import ApiKeys, RateLimiter, read_keys_file


def test_only_a_listed_bearer_key_passes(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# team keys\nsk-alpha\n\n  sk-beta  \n")
    keys = ApiKeys(read_keys_file(path))
    assert keys.check("Bearer sk-beta") == "sk-beta"
    assert keys.check("Bearer sk-alph") is None
    assert keys.check("sk-alpha") is None  # not a bearer header
    assert keys.check(None) is None
    with pytest.raises(UsageError, match="cannot read --api-keys-file"):
        read_keys_file(tmp_path / "missing")


def test_rate_limit_is_a_token_bucket_per_client() -> None:
    limiter = RateLimiter(rate_rps=2.0, burst=3)
    assert [limiter.try_take("k", now_s=0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.try_take("k", now_s=0.0) == pytest.approx(0.5)  # one token back in 0.5 s
    assert limiter.try_take("other", now_s=0.0) == 0.0  # clients do not share buckets
    assert limiter.try_take("k", now_s=0.5) == 0.0
