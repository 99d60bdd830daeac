"""API keys (constant-time check), rate limits, and the client identity they key on."""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from dataclasses import dataclass
from pathlib import Path

from kvwise.errors import UsageError
from kvwise.gateway.keys_file import KeyEntry, KeyLimits, name_of_unnamed_key, read_keys_file

MAX_TRACKED_CLIENTS = 100_000


OPEN_TENANT = "open"  # without API keys every client is one tenant (loopback use)
OPEN_NAME = "open"
NO_LIMITS = KeyLimits()


@dataclass(frozen=True)
class Caller:
    """Who sent a request. `tenant` owns sessions (a session id is only ever looked up within
    its tenant); `flow` is what rate limits and, without a session, fair queuing key on; `name`
    is the key's name (metrics, logs), `limits` its own limits from the keys file."""

    tenant: str  # "key:<digest of the API key>" (no key text kept), or OPEN_TENANT
    flow: str  # the tenant with API keys, else the client's address
    name: str = OPEN_NAME
    limits: KeyLimits = NO_LIMITS


def tenant_of_key(key: str) -> str:
    # 128 bits: two keys of one deployment never share sessions by a digest collision
    return "key:" + hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


# A keys file written in place is briefly empty or cut short; one changed this recently is read
# at the next check instead (a rename or SIGHUP is read at once: see docs/gateway.md)
SETTLE_S = 0.5


def _is_recent(stat: os.stat_result, settle_s: float) -> bool:
    return time.time() - stat.st_mtime < settle_s


class ApiKeys:
    """The accepted keys: fixed ones (flags) and those of a keys file, which `reload` reads
    again when the file changes (a key added, revoked or given new limits without a restart)."""

    def __init__(
        self, keys: tuple[str, ...], keys_file: Path | None = None, settle_s: float = SETTLE_S
    ) -> None:
        self._settle_s = settle_s
        self._fixed = [KeyEntry(name_of_unnamed_key(k), k) for k in keys]
        self._file = keys_file
        self._file_version: tuple[int, int, int] | None = None
        self._entries = [(e.key.encode(), e) for e in self._fixed]
        # decided once: a keys file emptied later locks everyone out, it never opens the door
        self._is_required = bool(keys) or keys_file is not None
        if keys_file is not None:
            self.reload()

    @property
    def is_required(self) -> bool:
        return self._is_required

    @property
    def names(self) -> list[str]:
        return [entry.name for _, entry in self._entries]

    def reload(self, force: bool = False) -> bool:
        """Read the keys file again if it changed since the last read (or `force`: SIGHUP);
        True when the keys in force changed. Raises UsageError when the file cannot be read or
        is not valid: the keys in force stay."""
        if self._file is None:
            return False
        try:
            stat = self._file.stat()
        except OSError as exc:
            raise UsageError(f"cannot read keys file {self._file}: {exc.strerror}") from exc
        version = (stat.st_mtime_ns, stat.st_size, stat.st_ino)  # ino: replaced by a rename
        if not force and version == self._file_version:
            return False
        if not force and self._is_in_place_edit(version) and _is_recent(stat, self._settle_s):
            return False  # perhaps half written (an editor saving in place): the next tick
        entries = [*self._fixed, *read_keys_file(self._file)]
        self._file_version = version
        is_changed = [e for _, e in self._entries] != entries
        self._entries = [(e.key.encode(), e) for e in entries]
        return is_changed

    def _is_in_place_edit(self, version: tuple[int, int, int]) -> bool:
        """The same file changed (a file renamed over it, the usual atomic save, is whole)."""
        return self._file_version is not None and version[2] == self._file_version[2]

    def check(self, authorization: str | None) -> KeyEntry | None:
        """The listed key sent as `Bearer <key>`, or None. Every key is compared, in constant
        time each, so the time taken says nothing about which key nearly matched."""
        scheme, _, credentials = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():  # RFC 7235: scheme is caseless
            return None
        offered = credentials.strip().encode()
        match: KeyEntry | None = None
        for key, entry in self._entries:
            if hmac.compare_digest(offered, key):
                match = entry
        return match


@dataclass
class _Bucket:
    tokens: float
    updated_s: float


class RateLimiter:
    """Token bucket per client: `rate_rps` sustained, bursts up to `burst` requests."""

    def __init__(self, rate_rps: float, burst: int) -> None:
        self.rate_rps = rate_rps
        self.burst = burst
        self._buckets: dict[str, _Bucket] = {}

    def try_take(self, client: str, now_s: float | None = None) -> float:
        """0 when the request may pass, else the seconds until one token is back."""
        bucket = self._refilled(client, now_s)
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return 0.0
        return (1 - bucket.tokens) / self.rate_rps

    def wait_s(self, client: str, now_s: float | None = None) -> float:
        """What `try_take` would answer, taking nothing."""
        bucket = self._refilled(client, now_s)
        return 0.0 if bucket.tokens >= 1 else (1 - bucket.tokens) / self.rate_rps

    def _refilled(self, client: str, now_s: float | None) -> _Bucket:
        now_s = time.monotonic() if now_s is None else now_s
        if len(self._buckets) > MAX_TRACKED_CLIENTS:
            self._buckets.clear()  # forget everyone rather than grow without bound
        bucket = self._buckets.setdefault(client, _Bucket(float(self.burst), now_s))
        bucket.tokens = min(self.burst, bucket.tokens + (now_s - bucket.updated_s) * self.rate_rps)
        bucket.updated_s = now_s
        return bucket


# fail2ban's defaults (jail.conf): maxretry = 5 failures within findtime = 10 minutes
MAX_AUTH_FAILURES = 5
AUTH_FAILURE_WINDOW_S = 600.0


class AuthFailures:
    """Failed key attempts per client address, as a token bucket (`max_failures` at once, as
    many again per `window_s`). An address out of attempts gets 429 without its key being
    checked at all, so guessing goes no faster than the bucket refills."""

    def __init__(
        self, max_failures: int = MAX_AUTH_FAILURES, window_s: float = AUTH_FAILURE_WINDOW_S
    ) -> None:
        self._bucket = RateLimiter(max_failures / window_s, max_failures)

    def wait_s(self, address: str) -> float:
        return self._bucket.wait_s(address)

    def record(self, address: str) -> None:
        self._bucket.try_take(address)
