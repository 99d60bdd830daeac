"""Per-key limits from the keys file, enforced at the door: requests per second (token bucket)
and requests in progress (queued or running). Queue share and weight are the fair queue's
(`kvwise.gateway.fairqueue`). Outcomes are counted per key name for /metrics; the key itself is
never a label.

A key's limits are read from the `Caller` at each request, so new limits from a reloaded keys
file apply to the next request. Its buckets and counts stay across reloads (a key given a lower
rate does not get a fresh burst), keyed by the key's tenant digest.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from kvwise.gateway.asgi import HttpError
from kvwise.gateway.metrics import Gauge
from kvwise.gateway.security import Caller, RateLimiter


@dataclass
class _KeyState:
    limiter: RateLimiter | None = None
    num_in_progress: int = 0


@dataclass
class TenantLimits:
    """What each key is allowed, and what it did (by name, for /metrics)."""

    _states: dict[str, _KeyState] = field(default_factory=dict)
    outcomes: defaultdict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    served_kv_tokens: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    in_progress: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))

    def enter(self, caller: Caller) -> None:
        """A request of `caller` starts, or 429 in OpenAI's shape (the caller must `leave`
        exactly once after a successful `enter`)."""
        state = self._states.setdefault(caller.tenant, _KeyState())
        limits = caller.limits
        if limits.rate_rps is not None:
            state.limiter = _limiter_for(state.limiter, limits.rate_rps, limits.burst)
            wait_s = state.limiter.try_take(caller.tenant)
            if wait_s > 0:
                self.count(caller.name, "rate_limited")
                raise HttpError(
                    429, f"rate limit of key {caller.name!r} exceeded ({limits.rate_rps:g}/s)",
                    "rate_limit_exceeded", headers={"retry-after": str(max(1, round(wait_s)))},
                )  # fmt: skip
        cap = limits.max_concurrency
        if cap is not None and state.num_in_progress >= cap:
            self.count(caller.name, "concurrency_limited")
            raise HttpError(
                429, f"key {caller.name!r} has {cap} requests in progress, its limit",
                "rate_limit_exceeded", headers={"retry-after": "1"},
            )  # fmt: skip
        state.num_in_progress += 1
        self.in_progress[caller.name] += 1

    def leave(self, caller: Caller) -> None:
        self._states[caller.tenant].num_in_progress -= 1
        self.in_progress[caller.name] -= 1

    def count(self, name: str, outcome: str) -> None:
        self.outcomes[(name, outcome)] += 1


def _limiter_for(current: RateLimiter | None, rate_rps: float, burst: int | None) -> RateLimiter:
    """The key's bucket, with its rate and burst as the keys file now says (tokens kept)."""
    burst = burst if burst is not None else max(1, round(rate_rps))  # a second's worth
    if current is None:
        return RateLimiter(rate_rps, burst)
    current.rate_rps, current.burst = rate_rps, burst
    return current


def tenant_series(tenants: TenantLimits) -> list[Gauge]:
    """/metrics per key name (never the key): outcomes at the door and in the queue, requests
    in progress, and KV tokens served (prompt + generated), what the fair queue shares out."""
    return [
        Gauge(
            "kvwise_key_requests_total", "requests per key name and outcome",
            lambda: {labels: float(n) for labels, n in tenants.outcomes.items()},
            ("key", "outcome"), kind="counter",
        ),
        Gauge(
            "kvwise_key_requests_in_progress", "requests of the key queued or running",
            lambda: {(name,): float(n) for name, n in tenants.in_progress.items()}, ("key",),
        ),
        Gauge(
            "kvwise_key_served_kv_tokens_total", "KV tokens served (prompt + generated)",
            lambda: {(name,): float(n) for name, n in tenants.served_kv_tokens.items()},
            ("key",), kind="counter",
        ),
    ]  # fmt: skip
