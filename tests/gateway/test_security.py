from __future__ import annotations

from pathlib import Path

import pytest

from kvwise.errors import UsageError
from kvwise.gateway.security import ApiKeys, AuthFailures, RateLimiter, read_keys_file


def key_of(keys: ApiKeys, authorization: str) -> str | None:
    entry = keys.check(authorization)
    return entry.key if entry is not None else None


def test_only_a_listed_bearer_key_passes(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# team keys\nsk-alpha\n\n  sk-beta  \n")
    keys = ApiKeys(tuple(entry.key for entry in read_keys_file(path)))
    assert key_of(keys, "Bearer sk-beta") == "sk-beta"
    assert keys.check("Bearer sk-alph") is None
    assert keys.check("sk-alpha") is None  # not a bearer header
    assert key_of(keys, "bearer sk-alpha") == key_of(keys, "BEARER  sk-alpha ") == "sk-alpha"
    assert keys.check("Basic sk-alpha") is None and keys.check("Bearer ") is None
    assert keys.check(None) is None
    with pytest.raises(UsageError, match="cannot read keys file"):
        read_keys_file(tmp_path / "missing")


def test_rate_limit_is_a_token_bucket_per_client() -> None:
    limiter = RateLimiter(rate_rps=2.0, burst=3)
    assert [limiter.try_take("k", now_s=0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.try_take("k", now_s=0.0) == pytest.approx(0.5)  # one token back in 0.5 s
    assert limiter.try_take("other", now_s=0.0) == 0.0  # clients do not share buckets
    assert limiter.try_take("k", now_s=0.5) == 0.0


def test_failed_attempts_are_a_bucket_per_address(monkeypatch: pytest.MonkeyPatch) -> None:
    now_s = [0.0]
    monkeypatch.setattr("kvwise.gateway.security.time.monotonic", lambda: now_s[0])
    failures = AuthFailures(max_failures=3, window_s=60.0)
    for _ in range(3):
        assert failures.wait_s("10.0.0.1") == 0
        failures.record("10.0.0.1")
    assert failures.wait_s("10.0.0.1") == pytest.approx(20.0)  # one attempt back per 20 s
    assert failures.wait_s("10.0.0.2") == 0  # addresses do not share attempts
    now_s[0] = 20.0
    assert failures.wait_s("10.0.0.1") == 0


def test_a_keys_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("sk-old\n")
    keys = ApiKeys(("sk-flag",), path, settle_s=0)
    assert key_of(keys, "Bearer sk-old") == "sk-old"
    assert not keys.reload()  # unchanged: not read again
    path.write_text("sk-new-key\n")  # sk-old revoked
    assert keys.reload()
    assert keys.check("Bearer sk-old") is None
    assert key_of(keys, "Bearer sk-new-key") == "sk-new-key"
    assert key_of(keys, "Bearer sk-flag") == "sk-flag"  # the flag's keys stay
    path.write_text("# everyone revoked\n")
    keys.reload()
    assert keys.is_required and keys.check("Bearer sk-new-key") is None  # locked, not opened
    path.unlink()
    with pytest.raises(UsageError, match="cannot read keys file"):
        keys.reload()
    assert key_of(keys, "Bearer sk-flag") == "sk-flag"


def test_a_keys_file_being_written_in_place_is_read_once_it_settles(tmp_path: Path) -> None:
    """An editor saving in place leaves the file empty or cut short for a moment: a change that
    recent is read at the next check; a file renamed over it (an atomic save) is read at once."""
    path = tmp_path / "keys"
    path.write_text("sk-alice\nsk-bob\n")
    keys = ApiKeys((), path, settle_s=60)
    path.write_text("sk-alice\n")  # half way through writing "sk-alice\nsk-bob\nsk-carol\n"
    assert not keys.reload()
    assert key_of(keys, "Bearer sk-bob") == "sk-bob"  # not locked out by a half-written file
    assert keys.reload(force=True)  # SIGHUP: the operator says it is whole
    assert key_of(keys, "Bearer sk-bob") is None
    staged = tmp_path / "keys.new"
    staged.write_text("sk-carol\n")
    staged.replace(path)
    assert keys.reload()
    assert key_of(keys, "Bearer sk-carol") == "sk-carol"
