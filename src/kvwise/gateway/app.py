"""The gateway process: its state (`Gateway`), its health loop, and the ASGI app.

Routes: POST /v1/chat/completions and /v1/completions (KV admission, streaming relay, failover),
GET /v1/models (from a healthy replica), /health, /metrics (Prometheus), /openapi.json,
/kvwise/status and /ui (the live view, admin keys as for /metrics).
API keys guard the /v1 routes; /health says up or down to anyone and details to admin keys;
/metrics is open, as on vLLM itself, unless admin keys are configured.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kvwise.errors import UsageError
from kvwise.gateway.admission import open_admission
from kvwise.gateway.asgi import HttpError, Receive, Scope, Send, header
from kvwise.gateway.config import GatewayConfig
from kvwise.gateway.cost_routing import make_router
from kvwise.gateway.endpoint import CompletionsEndpoint
from kvwise.gateway.internal_error import internal_error
from kvwise.gateway.keys_file import KeyEntry
from kvwise.gateway.launcher import Supervisor
from kvwise.gateway.membership import Membership, MembershipConfig
from kvwise.gateway.metrics import GatewayMetrics, Gauge
from kvwise.gateway.openapi import openapi_document
from kvwise.gateway.prepare import PrepareContext, TurnToStore, prepare_chat, prepare_completion
from kvwise.gateway.replica_admin import add_replica, drain_replica, list_replicas
from kvwise.gateway.replicas import Replica, parse_engine_metrics
from kvwise.gateway.security import (
    OPEN_TENANT,
    ApiKeys,
    AuthFailures,
    Caller,
    RateLimiter,
    tenant_of_key,
)
from kvwise.gateway.sessions import SessionStore, open_store, store_unavailable
from kvwise.gateway.status import StatusBoard
from kvwise.gateway.tenants import TenantLimits, tenant_series
from kvwise.gateway.tokens import load_tokenizer
from kvwise.gateway.ui import asset, page
from kvwise.gateway.upstream_http import UpstreamClient, UpstreamConnectionError, UpstreamTimeout

log = logging.getLogger("kvwise.gateway")


class Gateway:
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.replicas = [
            Replica(u.name, u.url, u.budget_tokens, u.max_num_seqs) for u in config.upstreams
        ]
        self.admission = open_admission(
            make_router(config.routing, self.replicas, config.routing_prior), config.admission
        )
        self.membership = Membership(
            self.replicas, self.admission.router, _membership_config(config), self._check
        )
        self.tokenizer = load_tokenizer(config.tokenizer_path)
        keys_file = config.security.api_keys_file
        self.api_keys = ApiKeys(config.security.api_keys, Path(keys_file) if keys_file else None)
        self.admin_keys = ApiKeys(config.security.admin_keys)
        security = config.security
        self.auth_failures = AuthFailures(
            security.max_auth_failures, security.auth_failure_window_s
        )
        rps = config.security.rate_limit_rps
        self.rate_limiter = RateLimiter(rps, config.security.rate_limit_burst) if rps else None
        self.tenants = TenantLimits()
        self.store: SessionStore | None = None
        self._prepare_context: PrepareContext | None = None
        self.num_sessions = 0
        self.metrics = GatewayMetrics(self)
        for series in tenant_series(self.tenants):
            self.metrics.registry.add(series)
        self.upstream_headers = {"content-type": "application/json"}
        if config.upstream_api_key:
            self.upstream_headers["authorization"] = f"Bearer {config.upstream_api_key}"
        self.upstream = UpstreamClient(
            config.connect_timeout_s, config.upstream_timeout_s, config.upstream_ca
        )
        self._health_task: asyncio.Task[None] | None = None
        self._is_stopping = False
        self._store_is_reachable = True

    @property
    def prepare_context(self) -> PrepareContext:
        context = self._prepare_context
        if context is None or context.store is not self.store:  # made once the store is open
            context = self._prepare_context = PrepareContext(
                self.tokenizer, self.config.max_model_len, self.config.sessions, self.store
            )
        return context

    async def start(self) -> None:
        if self.config.sessions is not None:
            self.store = open_store(self.config.sessions.store, self.config.sessions.caps)
        await self.admission.start()
        _on_sighup(lambda: self.reload_keys(force=True))
        await self.check_replicas()
        self._health_task = asyncio.create_task(self._health_loop())

    async def stop(self) -> None:
        self._is_stopping = True  # ends the loop even if a tick swallows the cancellation
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        await self.membership.close()
        await self.admission.close()
        await self.upstream.aclose()
        if self.store is not None:
            await self.store.close()

    def authorize(self, scope: Scope) -> Caller:
        """Who is asking (its tenant and fairness flow), or 401 / 429."""
        address = _address(scope)
        caller = Caller(OPEN_TENANT, address)
        if self.api_keys.is_required:
            entry = self._check_key(self.api_keys, scope, address)
            tenant = tenant_of_key(entry.key)
            caller = Caller(tenant, tenant, entry.name, entry.limits)
        if self.rate_limiter is not None:
            wait_s = self.rate_limiter.try_take(caller.flow)
            if wait_s > 0:
                self.metrics.rate_limited.inc()
                raise HttpError(429, "rate limit exceeded for this API key", "rate_limit_exceeded",
                                headers={"retry-after": str(max(1, round(wait_s)))})  # fmt: skip
        return caller

    def is_admin(self, scope: Scope) -> bool:
        """An admin key was sent. False for none and for an API key (a client polling /health
        with its own key must not lock itself out); 401 / 429 for any other key."""
        authorization = header(scope, b"authorization")
        if not self.admin_keys.is_required or authorization is None:
            return False
        if self.api_keys.check(authorization) is not None:
            return False
        self._check_key(self.admin_keys, scope, _address(scope))
        return True

    def _check_key(self, keys: ApiKeys, scope: Scope, address: str) -> KeyEntry:
        """The key sent, if listed; an address out of attempts is not even checked (429)."""
        wait_s = self.auth_failures.wait_s(address)
        if wait_s > 0:
            self.metrics.rate_limited.inc()
            raise HttpError(429, "too many failed API key attempts from this address",
                            "rate_limit_exceeded", headers={"retry-after": str(math.ceil(wait_s))})  # fmt: skip
        key = keys.check(header(scope, b"authorization"))
        if key is None:
            self.auth_failures.record(address)
            raise HttpError(401, "missing or invalid API key", "authentication_error")
        return key

    def mark_down(self, replica: Replica, reason: str = "") -> None:
        """Out of service until a health probe gets an answer; the requests still waiting for
        its response head are aborted, and fail over like any other failure before a token."""
        if replica.is_healthy:
            log.warning("replica %s marked down%s", replica.name, f" ({reason})" if reason else "")
        replica.is_healthy = False
        num_aborted = self.upstream.abort_waiting(replica.url)
        if num_aborted:
            log.warning(
                "replica %s: %d waiting request(s) sent elsewhere", replica.name, num_aborted
            )

    def count_response(self, status: int) -> None:
        self.metrics.responses.inc(str(status))

    async def store_turn(self, turn: TurnToStore, reply: dict[str, Any]) -> None:
        assert self.store is not None
        try:
            await self.store.append_turn(
                turn.session_id, turn.system, [*turn.new_messages, reply], turn.num_kept
            )
        except Exception as exc:  # the client must not take an unstored turn for a stored one
            log.warning("session store failed to store a turn: %s", exc)
            raise store_unavailable("the turn was not stored; send it again") from None

    async def check_replicas(self) -> None:
        self.reload_keys()
        await self.membership.tick()  # replicas found, joined, drained since the last tick
        await asyncio.gather(*(self._check(r) for r in self.replicas))
        if self.store is not None:
            await self._count_sessions(self.store)
        self.admission.dispatch()  # a replica back, or load gone down: queued requests may go

    def reload_keys(self, force: bool = False) -> None:
        """A keys file edited since the last tick (or on SIGHUP, `force`) is read again: keys
        added, revoked or given new limits, no restart. A file that cannot be read or is not
        valid keeps the keys in force."""
        try:
            if self.api_keys.reload(force):
                names = ", ".join(self.api_keys.names) or "none"
                log.warning("keys file read again: keys in force: %s", names)
        except UsageError as exc:
            log.warning("%s; the keys in force stay", exc)

    async def _count_sessions(self, store: SessionStore) -> None:
        """The sessions gauge; a store that cannot answer is one warning, not one per tick."""
        try:
            self.num_sessions = await store.count_sessions()
        except Exception as exc:  # redis down, SQLite locked...: requests report it themselves
            if self._store_is_reachable:
                log.warning("session store not answering: %s", exc)
            self._store_is_reachable = False
        else:
            if not self._store_is_reachable:
                log.warning("session store answering again")
            self._store_is_reachable = True

    async def _check(self, replica: Replica) -> None:
        """Down when it refuses connections, answers /health with an error, or leaves
        `health_failures` probes in a row unanswered within `health_timeout_s` (a hung process:
        it accepts connections and says nothing). Up again at its first good answer."""
        try:
            timeout_s = self.config.health_timeout_s
            status, _ = await self.upstream.get_body(f"{replica.url}/health", timeout_s=timeout_s)
            if status != 200:
                log.warning("replica %s answers /health with %d", replica.name, status)
                self.mark_down(replica)
                return
            status, body = await self.upstream.get_body(
                f"{replica.url}/metrics", timeout_s=timeout_s
            )
        except UpstreamTimeout:
            replica.num_failed_probes += 1
            if replica.num_failed_probes >= self.config.health_failures:
                self.mark_down(replica, f"{replica.num_failed_probes} probes unanswered")
            else:
                log.warning("replica %s slow to answer its health check", replica.name)
            return
        except UpstreamConnectionError as exc:
            self.mark_down(replica, str(exc))
            return
        if not replica.is_healthy:
            log.warning("replica %s answers again: back in service", replica.name)
        replica.is_healthy, replica.num_failed_probes = True, 0
        replica.load = parse_engine_metrics(body.decode()) if status == 200 else None

    async def _health_loop(self) -> None:
        # Python 3.11's asyncio.wait_for returns a result that completed as it was cancelled,
        # dropping the cancellation: the flag, not the cancel alone, is what ends this loop
        while not self._is_stopping:
            await asyncio.sleep(self.config.health_interval_s)
            try:
                await self.check_replicas()
            except Exception:  # the loop must outlive any one bad tick
                log.exception("health check failed")


def _on_sighup(callback: Callable[[], None]) -> None:
    """`kill -HUP` reads the keys file at once (as nginx and sshd read their configuration);
    only the main thread's event loop can take signals (not a gateway started in a test)."""
    with contextlib.suppress(ValueError, RuntimeError, NotImplementedError, AttributeError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, callback)


def _membership_config(config: GatewayConfig) -> MembershipConfig:
    if config.membership is not None:
        return config.membership
    first = config.upstreams[0] if config.upstreams else None
    return MembershipConfig(
        first.budget_tokens if first else 0, first.max_num_seqs if first else None
    )


def _address(scope: Scope) -> str:
    return str(scope["client"][0]) if scope.get("client") else "unknown"


async def _health(request: Request) -> Response:
    """Up or down for anyone (load balancers); the replicas and their addresses for admins."""
    gateway: Gateway = request.app.state.gateway
    status = 200 if any(r.is_in_service for r in gateway.replicas) else 503
    body: dict[str, Any] = {"status": "ok" if status == 200 else "unavailable"}
    try:
        if gateway.is_admin(request.scope):
            body["replicas"] = {
                r.name: {"url": r.url, "healthy": r.is_healthy} for r in gateway.replicas
            }
    except HttpError as exc:
        return JSONResponse(exc.body(), exc.status, exc.headers)
    return JSONResponse(body, status)


async def _metrics(request: Request) -> Response:
    """Open, as on vLLM, unless admin keys are configured: then for admins only."""
    gateway: Gateway = request.app.state.gateway
    try:
        if gateway.admin_keys.is_required and not gateway.is_admin(request.scope):
            raise HttpError(401, "an admin key is required", "authentication_error")
    except HttpError as exc:
        return JSONResponse(exc.body(), exc.status, exc.headers)
    return Response(gateway.metrics.registry.render(), media_type=CONTENT_TYPE_PLAIN_0_0_4)


async def _models(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    try:
        gateway.authorize(request.scope)
    except HttpError as exc:
        return JSONResponse(exc.body(), exc.status, exc.headers)
    for replica in (r for r in gateway.replicas if r.is_healthy):
        try:
            status, body = await gateway.upstream.get_body(
                f"{replica.url}/v1/models", gateway.upstream_headers
            )
        except UpstreamConnectionError:
            continue
        if status == 200:
            return Response(body, media_type="application/json")
    error = HttpError(503, "no healthy replica", "service_unavailable")
    return JSONResponse(error.body(), error.status)


async def _openapi(request: Request) -> Response:
    return JSONResponse(openapi_document())


def create_app(config: GatewayConfig, supervisor: Supervisor | None = None) -> _HotPath:
    """The ASGI app; with a `Supervisor` (from --launch) it also keeps the replicas running."""
    gateway = Gateway(config)
    if supervisor is not None:
        restarts = Gauge(
            "kvwise_replica_restarts_total",
            "replicas restarted after they exited",
            lambda: {(name,): float(run.num_restarts) for name, run in supervisor.running.items()},
            ("replica",),
            kind="counter",
        )
        gateway.metrics.registry.add(restarts)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await gateway.start()
        # What start-up created lives as long as the process: out of the collector's sight,
        # full collections stay short (they would otherwise walk every imported module's objects
        # while requests wait). Garbage first, or it would be frozen (never freed) with the rest.
        gc.collect()
        gc.freeze()
        watch = asyncio.create_task(supervisor.watch()) if supervisor is not None else None
        try:
            yield
        finally:
            if watch is not None:
                watch.cancel()
            await gateway.stop()

    completions = {
        "/v1/chat/completions": CompletionsEndpoint(gateway, prepare_chat),
        "/v1/completions": CompletionsEndpoint(gateway, prepare_completion),
    }
    routes = [Route(path, endpoint, methods=["POST"]) for path, endpoint in completions.items()]
    routes += [
        Route("/v1/models", _models, methods=["GET"]),
        Route("/health", _health, methods=["GET"]),
        Route("/metrics", _metrics, methods=["GET"]),
        Route("/openapi.json", _openapi, methods=["GET"]),
        Route("/kvwise/status", StatusBoard(gateway).endpoint, methods=["GET"]),
        Route("/kvwise/replicas", list_replicas, methods=["GET"]),
        Route("/kvwise/replicas", add_replica, methods=["POST"]),
        Route("/kvwise/replicas/drain", drain_replica, methods=["POST"]),
        Route("/ui", page, methods=["GET"]),
        Route("/ui/{name}", asset, methods=["GET"]),
    ]

    async def on_error(request: Request, exc: Exception) -> Response:
        error = internal_error(gateway, request.scope, exc)
        return JSONResponse(error.body(), error.status, error.headers)

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={Exception: on_error})
    app.state.gateway = gateway
    return _HotPath(app, completions)


class _HotPath:
    """POSTs to the completion endpoints go straight to them; everything else (lifespan, other
    routes, 404/405) through Starlette. Starlette's middleware wraps every `send`, and the
    streaming relay calls `send` once per SSE event."""

    def __init__(self, app: Starlette, completions: dict[str, CompletionsEndpoint]) -> None:
        self.app = app
        self.state = app.state
        self._completions = completions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self._completions.get(scope["path"])
            if endpoint is not None:
                try:
                    await endpoint(scope, receive, send)
                except Exception:
                    log.exception("unhandled error in %s", scope["path"])
                    raise
                return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # Starlette re-raises what its error handler has already answered and logged
        with contextlib.suppress(Exception):
            await self.app(scope, receive, send)
