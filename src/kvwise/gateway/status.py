"""GET /kvwise/status: the live figures `kvwise top` and the /ui page share, as JSON.

Per replica: the gateway's budget (the planned pool) and reservations beside what the engine's
/metrics says (KV use, running/waiting, preemptions/min, TTFT/TPOT p50/p99 over the last
minute, tokens/s). For the gateway: queue depth, admitted/queued/rejected, budget in use,
sessions, the flows with the most KV tokens queued, 429s per minute, its own TTFT/TPOT. Plus
host memory, departures from the plan, and a history of points for the page's charts.

Engines are scraped when the status is asked for (at most once a second), never on the relay's
path; the history therefore covers the time someone was watching. Admin keys guard it as they
guard /metrics; a browser may send the admin key as the password of HTTP Basic auth.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import time
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kvwise.core import gpus
from kvwise.gateway.asgi import HttpError, Scope
from kvwise.gateway.metrics import Histogram
from kvwise.gateway.upstream_http import UpstreamConnectionError
from kvwise.live import histograms
from kvwise.live.status import status_document
from kvwise.live.window import WINDOW_S, EngineWindow, parse_sample

MIN_REFRESH_S = 1.0
SCRAPE_TIMEOUT_S = 2.0
HISTORY_POINTS = 600  # 10 minutes at the page's 1 s polling
NUM_TOP_FLOWS = 5
REALM_HEADER = {"www-authenticate": 'Basic realm="kvwise admin", charset="UTF-8"'}


def admin_denial(gateway: Any, scope: Scope) -> Response | None:
    """None when the caller may see admin views (no admin keys set, or one sent); else 401/429."""
    if not gateway.admin_keys.is_required:
        return None
    try:
        if gateway.is_admin(_basic_as_bearer(scope)):
            return None
        error = HttpError(401, "an admin key is required", "authentication_error")
    except HttpError as exc:
        error = exc
    headers = {**(error.headers or {}), **(REALM_HEADER if error.status == 401 else {})}
    return JSONResponse(error.body(), error.status, headers)


def _basic_as_bearer(scope: Scope) -> Scope:
    """`Authorization: Basic base64(any-user:key)` (a browser's login prompt) as `Bearer key`."""
    headers = scope.get("headers", [])
    for name, value in headers:
        if name == b"authorization" and value[:6].lower() == b"basic ":
            try:
                _, _, key = base64.b64decode(value[6:].strip()).partition(b":")
            except ValueError:
                return scope
            rest = [(n, v) for n, v in headers if n != b"authorization"]
            return {**scope, "headers": [*rest, (b"authorization", b"Bearer " + key)]}
    return scope


@dataclass(frozen=True)
class _GatewaySample:
    at_s: float
    num_429: float
    ttft: histograms.Buckets
    tpot: histograms.Buckets


class StatusBoard:
    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway
        self.windows = {r.name: EngineWindow() for r in gateway.replicas}
        self.own: collections.deque[_GatewaySample] = collections.deque()
        self.history: collections.deque[dict[str, Any]] = collections.deque(maxlen=HISTORY_POINTS)
        self._last: dict[str, Any] | None = None
        self._last_at_s = 0.0
        self._lock = asyncio.Lock()

    async def endpoint(self, request: Request) -> Response:
        denial = admin_denial(self.gateway, request.scope)
        if denial is not None:
            return denial
        return JSONResponse(await self.status())

    async def status(self) -> dict[str, Any]:
        async with self._lock:
            if self._last is None or time.monotonic() - self._last_at_s >= MIN_REFRESH_S:
                await asyncio.gather(*(self._scrape(r) for r in self.gateway.replicas))
                self._last = self._compose()
                self._last_at_s = time.monotonic()
            return self._last

    async def _scrape(self, replica: Any) -> None:
        if not replica.is_healthy:
            return
        try:
            status, body = await self.gateway.upstream.get_body(
                f"{replica.url}/metrics", timeout_s=SCRAPE_TIMEOUT_S
            )
        except UpstreamConnectionError:
            return
        if status == 200:
            self.windows.setdefault(replica.name, EngineWindow()).add(parse_sample(body.decode()))

    def _compose(self) -> dict[str, Any]:
        replicas = [self._replica(r) for r in self.gateway.replicas]
        gateway = self._gateway_figures()
        status = status_document("gateway", replicas, gateway, gpus.gpu_memory())
        self.history.append(_history_point(status))
        status["history"] = list(self.history)
        return status

    def _replica(self, replica: Any) -> dict[str, Any]:
        figures = {"name": replica.name, "url": replica.url, "healthy": replica.is_healthy}
        figures.update(
            self.windows.setdefault(replica.name, EngineWindow()).figures(replica.budget_tokens)
        )
        figures["planned_pool_tokens"] = replica.budget_tokens
        figures["reserved_tokens"] = replica.reserved_tokens
        figures["num_in_flight"] = replica.num_in_flight
        return figures

    def _gateway_figures(self) -> dict[str, Any]:
        gateway = self.gateway
        admission, metrics = gateway.admission, gateway.metrics
        now = _GatewaySample(
            time.monotonic(),
            metrics.responses.get("429"),
            _buckets(metrics.ttft),
            _buckets(metrics.tpot),
        )
        self.own.append(now)
        while len(self.own) > 2 and now.at_s - self.own[1].at_s >= WINDOW_S:
            self.own.popleft()
        first = self.own[0]
        span_s = now.at_s - first.at_s
        figures: dict[str, Any] = {
            "queue_depth": len(admission.queue),
            "queue_tokens": admission.queue.queued_tokens,
            "num_admitted": admission.num_admitted,
            "num_queued": admission.num_queued,
            "num_rejected": admission.num_rejected,
            "budget_tokens": sum(r.budget_tokens for r in gateway.replicas),
            "reserved_tokens": admission.reserved_tokens,
            "num_sessions": gateway.num_sessions if gateway.store is not None else None,
            "top_queued_flows": top_queued_flows(admission.queue),
            "window_s": round(span_s, 1),
            "rejected_429_per_min": (
                round((now.num_429 - first.num_429) / span_s * 60, 2) if span_s > 0 else None
            ),
        }
        for key in ("ttft", "tpot"):
            window = histograms.delta(getattr(now, key), getattr(first, key) if span_s else None)
            for label, q in (("p50", 0.5), ("p99", 0.99)):
                value = histograms.quantile(window, q)
                figures[f"{key}_{label}_ms"] = None if value is None else round(value * 1000, 1)
        return figures


def top_queued_flows(queue: Any) -> list[dict[str, Any]]:
    """The flows (session, else API key, else address) with the most KV tokens queued.
    In-flight KV is held per replica, not per flow: admission does not keep it by session."""
    tokens = queue.queued_tokens_by_flow()
    ranked = sorted(tokens.items(), key=lambda item: -item[1])[:NUM_TOP_FLOWS]
    return [{"flow": flow[:48], "queued_tokens": n} for flow, n in ranked if n > 0]


def _buckets(histogram: Histogram) -> histograms.Buckets:
    return histogram.cumulative()


def _history_point(status: dict[str, Any]) -> dict[str, Any]:
    replicas, gateway = status["replicas"], status["gateway"]

    def total(key: str) -> float | None:
        values = [r[key] for r in replicas if r.get(key) is not None]
        return sum(values) if values else None

    return {
        "time_s": status["time_s"],
        "kv_used_tokens": total("kv_used_tokens"),
        "reserved_tokens": gateway["reserved_tokens"],
        "planned_pool_tokens": total("planned_pool_tokens"),
        "kv_pool_tokens": total("kv_pool_tokens"),
        "queue_depth": gateway["queue_depth"],
        "ttft_p50_ms": gateway["ttft_p50_ms"],
        "ttft_p99_ms": gateway["ttft_p99_ms"],
        "rejected_429_per_min": gateway["rejected_429_per_min"],
        "preemptions_per_min": total("preemptions_per_min"),
    }
