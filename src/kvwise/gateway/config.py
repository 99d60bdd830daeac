"""The gateway's configuration: frozen values, each component gets the part it needs."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvwise.core.trimming import TRIM_LOW_WATER
from kvwise.gateway.admission import AdmissionConfig
from kvwise.gateway.membership import MembershipConfig
from kvwise.gateway.security import AUTH_FAILURE_WINDOW_S, MAX_AUTH_FAILURES
from kvwise.gateway.sessions import SessionCaps

KIB = 2**10
MIB = 2**20


def default_max_connections() -> int:
    """Half the process's open-file limit, less a margin for the store, logs and listeners (a
    request holds a client connection and an upstream one), at most 2048."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError):  # no such limit on this platform
        return 2048
    if soft == resource.RLIM_INFINITY:
        return 2048
    return max(16, min(2048, (soft - 64) // 2))


@dataclass(frozen=True)
class ServerLimits:
    """What a client may make the server hold before authorization (kvwise.gateway.server_limits
    enforces them and gives the sources of the defaults)."""

    max_head_bytes: int = 32 * KIB
    max_headers: int = 100
    head_timeout_s: float = 20.0
    body_timeout_s: float = 60.0
    keep_alive_timeout_s: int = 5  # uvicorn takes whole seconds
    max_connections: int = field(default_factory=default_max_connections)


@dataclass(frozen=True)
class SecurityConfig:
    api_keys: tuple[str, ...] = ()  # empty (and no file): no authentication (loopback use)
    max_body_bytes: int = 8 * MIB
    rate_limit_rps: float | None = None  # per API key (or client address without keys)
    rate_limit_burst: int = 20
    admin_keys: tuple[str, ...] = ()  # for /metrics and /health's details; empty: /metrics open
    max_auth_failures: int = MAX_AUTH_FAILURES  # per client address, refilled over the window
    auth_failure_window_s: float = AUTH_FAILURE_WINDOW_S
    api_keys_file: str | None = None  # one key per line, read again when it changes


@dataclass(frozen=True)
class SessionConfig:
    store: str  # SQLite path or redis:// URL
    caps: SessionCaps
    is_history_enabled: bool  # rebuild prompts from the stored history (--session-history)
    reply_reserve_tokens: int  # kept free for the reply when a request sets no max_tokens
    max_prompt_tokens: int | None  # trim histories to this even when max_model_len allows more
    trim_low_water: float = TRIM_LOW_WATER  # cut down to this share of the budget (prefix-stable)
    is_user_session: bool = False  # the OpenAI `user` field names the session (--session-from-user)


@dataclass(frozen=True)
class UpstreamSpec:
    name: str
    url: str
    budget_tokens: int
    max_num_seqs: int | None = None  # the engine's running cap, when known


@dataclass(frozen=True)
class GatewayConfig:
    upstreams: tuple[UpstreamSpec, ...]
    max_model_len: int
    admission: AdmissionConfig
    security: SecurityConfig
    sessions: SessionConfig | None
    tokenizer_path: str | None = None  # model folder or tokenizer.json; else byte estimate
    upstream_api_key: str | None = None  # sent to the engines, never the client's key
    upstream_ca: str | None = None  # CA file for https:// engines; else the system's store
    health_interval_s: float = 1.0
    # A probe (/health, /metrics) unanswered in health_timeout_s fails; health_failures failed
    # in a row mark the replica down (Kubernetes' probe failureThreshold default: 3)
    health_timeout_s: float = 5.0
    health_failures: int = 3
    connect_timeout_s: float = 5.0
    upstream_timeout_s: float = 600.0  # a whole (non-streamed) reply, head included
    # A stream silent this long (no response head, no chunk) is a hung replica: vLLM's own
    # VLLM_ENGINE_ITERATION_TIMEOUT_S default (vllm/envs.py) for one engine step
    stall_timeout_s: float = 60.0
    routing: str = "affinity"  # cost | affinity | round-robin (kvwise.gateway.cost_routing)
    # the cost router's prior (s/step, s/prefilled token, s/running sequence), from the plan's
    # step model when MODEL and --gpu are given; None: cost_routing.PRIOR
    routing_prior: tuple[float, float, float] | None = None
    server: ServerLimits = ServerLimits()
    # replicas that join later (--upstream-dns, the admin routes); None: as the first upstream
    membership: MembershipConfig | None = None
