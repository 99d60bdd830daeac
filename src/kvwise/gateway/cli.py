"""`kvwise serve`: the gateway in front of running engines (--upstream) or launched ones (--launch).

    kvwise serve --upstream http://127.0.0.1:8001 --kv-budget-tokens 60000
    kvwise serve Qwen/Qwen2.5-7B-Instruct --gpu rtx4090 --max-model-len 16384 --launch
    kvwise serve --demo
    kvwise serve Qwen/Qwen2.5-7B-Instruct --gpu rtx4090 --engine sglang --launch   (GPU only)

Where the limits come from, first match wins:
    KV budget per replica   --kv-budget-tokens; the plan's KV tokens; the engine's own pool
                            (vLLM: /metrics `vllm:cache_config_info`; SGLang: /metrics
                            `sglang:max_total_num_tokens`, else /server_info)
    max_model_len           --max-model-len; the plan's; the engine's /v1/models
At start it prints the limits it enforces and where each came from (`--json`: as JSON).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import uvicorn  # the serve extra, imported first: without it, one line says what to install

from kvwise.core.command_parser import CommandParser
from kvwise.core.flags import add_vllm_flags, flags_from_args
from kvwise.core.trimming import TRIM_LOW_WATER
from kvwise.errors import UsageError
from kvwise.gateway.admission import AdmissionConfig
from kvwise.gateway.config import (
    MIB,
    GatewayConfig,
    SecurityConfig,
    ServerLimits,
    SessionConfig,
    UpstreamSpec,
)
from kvwise.gateway.cost_routing import DEFAULT_ROUTING, ROUTING_POLICIES
from kvwise.gateway.discovery import Limits, PlannedLimits, discover_limits, plan_limits
from kvwise.gateway.launcher import EngineCommand, Started
from kvwise.gateway.membership import DNS_INTERVAL_S, MembershipConfig
from kvwise.gateway.replica_dns import DnsTarget, dns_target
from kvwise.gateway.security import AUTH_FAILURE_WINDOW_S, MAX_AUTH_FAILURES, read_keys_file
from kvwise.gateway.sessions import SessionCaps
from kvwise.gateway.startup_summary import describe, print_limits
from kvwise.gateway.upstream_http import tls_context
from kvwise.planner.cli import add_sglang_flags

DEFAULT_SESSION_STORE = "~/.cache/kvwise/sessions.sqlite3"
DAY_S = 86_400


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="kvwise serve", description=__doc__.splitlines()[0])
    parser.add_argument(
        "model", nargs="?", help="model to plan for and launch (HF id, catalog name, dir)"
    )
    parser.add_argument("--gpu", help="GPU catalog name, for the plan")
    parser.add_argument("--gpu-memory-gib", type=float, help="any other GPU: its memory in GiB")
    parser.add_argument("--vllm-version", help="vLLM release whose accounting the plan uses")
    engines = parser.add_argument_group("engines")
    engines.add_argument(
        "--upstream", action="append", default=[], help="running OpenAI-compatible server"
    )
    engines.add_argument(
        "--engine", choices=("vllm", "sglang"), default="vllm",
        help="the engine to plan for and --launch (default vllm)",
    )  # fmt: skip
    engines.add_argument(
        "--upstream-dns",
        metavar="NAME:PORT",
        help="find replicas by DNS, every A/AAAA record one (a Kubernetes headless Service: "
        "vllm-headless.NAMESPACE.svc.cluster.local:8000); resolved again every --dns-interval, "
        "new ones join once healthy, vanished ones are drained",
    )
    engines.add_argument(
        "--dns-interval", type=float, default=DNS_INTERVAL_S, help="seconds between resolutions"
    )
    engines.add_argument(
        "--dns-server", metavar="IP[:PORT]", help="nameserver to ask (default: /etc/resolv.conf's)"
    )
    engines.add_argument(
        "--launch", action="store_true", help="start engine replicas with the planned flags"
    )
    engines.add_argument(
        "--replicas", type=int, default=1, help="with --launch (one per GPU or TP group)"
    )
    engines.add_argument(
        "--engine-command",
        help="template, default 'vllm serve {model}' (SGLang: "
        "'python3 -m sglang.launch_server --model-path {model}')",
    )
    engines.add_argument("--log-dir", type=Path, default=Path("kvwise-logs"), help="replica logs")
    engines.add_argument(
        "--demo", action="store_true", help="serve SmolLM2-135M-Instruct on the CPU engine"
    )
    engines.add_argument("--upstream-api-key", help="key the engines expect (never the client's)")
    engines.add_argument(
        "--upstream-ca", metavar="FILE",
        help="CA certificate(s), PEM, that https:// upstreams are verified against (default: "
        "the system's store, or SSL_CERT_FILE)",
    )  # fmt: skip
    d = GatewayConfig.__dataclass_fields__
    engines.add_argument(
        "--stall-timeout", type=float, default=d["stall_timeout_s"].default,
        help="seconds a stream may stay silent (before its head, between chunks) before its "
        "replica is taken for hung",
    )  # fmt: skip
    engines.add_argument(
        "--health-timeout", type=float, default=d["health_timeout_s"].default,
        help="seconds a health probe may take",
    )  # fmt: skip
    engines.add_argument(
        "--health-failures", type=int, default=d["health_failures"].default,
        help="probes unanswered in a row before a replica is down",
    )  # fmt: skip
    _add_gateway_flags(parser)
    add_vllm_flags(parser)
    add_sglang_flags(parser)
    parser.add_argument("--json", action="store_true", help="print the enforced limits as JSON")
    return parser


def _add_gateway_flags(parser: argparse.ArgumentParser) -> None:
    gateway = parser.add_argument_group("gateway")
    gateway.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    gateway.add_argument("--port", type=int, default=8000)
    gateway.add_argument(
        "--kv-budget-tokens", type=int, help="KV tokens per replica (overrides the plan)"
    )
    gateway.add_argument("--max-queue", type=int, default=256, help="requests waiting; 429 beyond")
    gateway.add_argument(
        "--queue-timeout", type=float, default=60.0, help="seconds a request may wait"
    )
    gateway.add_argument(
        "--admission-store",
        help="redis://HOST:PORT/DB: one KV budget shared by every gateway using it "
        "(default: this process's own)",
    )
    gateway.add_argument(
        "--tokenizer", help="tokenizer.json or model folder, for exact prompt counts"
    )
    gateway.add_argument(
        "--routing", choices=ROUTING_POLICIES, default=DEFAULT_ROUTING,
        help="cost: the replica with the least predicted TTFT (queue + uncached prompt); "
        "affinity: consistent hashing of the session, bounded by load; round-robin",
    )  # fmt: skip
    security = parser.add_argument_group("security")
    security.add_argument(
        "--api-key", action="append", default=[], help="accepted key (repeatable)"
    )
    security.add_argument(
        "--keys-file", "--api-keys-file", dest="api_keys_file", type=Path,
        help="YAML: keys with names and per-key limits (rate, concurrency, queue share, weight), "
        "or one key per line; read again when it changes and on SIGHUP",
    )  # fmt: skip
    security.add_argument(
        "--admin-key", action="append", default=[],
        help="key for /metrics and /health's replica details (repeatable; without one, /metrics "
        "is open and the details are shown to no one)",
    )  # fmt: skip
    security.add_argument(
        "--max-auth-failures", type=int, default=MAX_AUTH_FAILURES,
        help="wrong keys one address may send per --auth-failure-window before 429s",
    )  # fmt: skip
    security.add_argument("--auth-failure-window", type=float, default=AUTH_FAILURE_WINDOW_S)
    security.add_argument("--max-body-bytes", type=int, default=8 * MIB)
    security.add_argument("--rate-limit", type=float, help="requests per second per key")
    security.add_argument("--rate-burst", type=int, default=20)
    _add_server_flags(parser)
    sessions = parser.add_argument_group("agent sessions")
    sessions.add_argument(
        "--session-history", action="store_true", help="store turns, rebuild prompts"
    )
    sessions.add_argument(
        "--session-store", default=DEFAULT_SESSION_STORE, help="SQLite path or redis://"
    )
    sessions.add_argument(
        "--session-store-durable",
        action="store_true",
        help="refuse to start on a Redis that can lose acknowledged turns (else: one warning)",
    )
    sessions.add_argument(
        "--session-ttl", type=float, default=7 * DAY_S, help="seconds idle before forgotten"
    )
    sessions.add_argument(
        "--session-from-user",
        action="store_true",
        help="take the OpenAI `user` field as the session id when X-Session-Id is absent "
        "(by default `user` only labels the end user, for fairness and routing)",
    )
    sessions.add_argument("--session-max-messages", type=int, default=2000)
    sessions.add_argument("--session-max-bytes", type=int, default=16 * MIB)
    sessions.add_argument(
        "--session-reply-tokens", type=int, default=1024, help="kept free for the reply"
    )
    sessions.add_argument("--session-max-prompt-tokens", type=int, help="trim histories to this")
    sessions.add_argument(
        "--session-trim-low-water",
        type=float,
        default=TRIM_LOW_WATER,
        help="when trimming, cut down to this share of the budget so later turns reuse the "
        "cached prefix (1 = cut just enough)",
    )


def _add_server_flags(parser: argparse.ArgumentParser) -> None:
    d = ServerLimits()
    server = parser.add_argument_group("connections (enforced before the API key is checked)")
    server.add_argument("--max-head-bytes", type=int, default=d.max_head_bytes,
                        help="request line + headers; 431 beyond")  # fmt: skip
    server.add_argument("--max-headers", type=int, default=d.max_headers, help="431 beyond")
    server.add_argument("--head-timeout", type=float, default=d.head_timeout_s,
                        help="seconds to receive a request head (408 after)")  # fmt: skip
    server.add_argument("--body-timeout", type=float, default=d.body_timeout_s,
                        help="seconds to receive a request body once its head is in")  # fmt: skip
    server.add_argument("--keep-alive-timeout", type=int, default=d.keep_alive_timeout_s,
                        help="seconds an idle kept-alive connection stays open")  # fmt: skip
    server.add_argument("--max-connections", type=int, default=d.max_connections,
                        help="connections and requests at once; 503 beyond")  # fmt: skip


def server_limits(args: argparse.Namespace) -> ServerLimits:
    return ServerLimits(
        args.max_head_bytes,
        args.max_headers,
        args.head_timeout,
        args.body_timeout,
        args.keep_alive_timeout,
        args.max_connections,
    )


def _positive(args: argparse.Namespace, *names: str) -> None:
    for name in names:
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {value}")


def security_config(args: argparse.Namespace) -> SecurityConfig:
    return SecurityConfig(
        tuple(args.api_key),
        args.max_body_bytes,
        args.rate_limit,
        args.rate_burst,
        admin_keys=tuple(args.admin_key),
        max_auth_failures=args.max_auth_failures,
        auth_failure_window_s=args.auth_failure_window,
        api_keys_file=str(args.api_keys_file) if args.api_keys_file else None,
    )


def session_config(args: argparse.Namespace) -> SessionConfig:
    if not 0 < args.session_trim_low_water <= 1:
        raise UsageError(
            f"--session-trim-low-water must be in (0, 1], got {args.session_trim_low_water}"
        )
    caps = SessionCaps(args.session_ttl, args.session_max_messages, args.session_max_bytes)
    return SessionConfig(
        store=args.session_store,
        caps=caps,
        is_history_enabled=args.session_history,
        reply_reserve_tokens=args.session_reply_tokens,
        max_prompt_tokens=args.session_max_prompt_tokens,
        trim_low_water=args.session_trim_low_water,
        is_user_session=args.session_from_user,
    )


def engine_command(args: argparse.Namespace, planned: PlannedLimits | None) -> EngineCommand:
    """vLLM with the flags given (vLLM resolves the rest itself), or SGLang with every flag
    the SGLang plan resolved, which needs the plan (a MODEL and --gpu)."""
    from kvwise.gateway.launcher import sglang_engine, vllm_engine

    if args.engine == "vllm":
        return vllm_engine(flags_from_args(args), args.engine_command)
    if planned is None or planned.sglang_args is None:
        raise UsageError(
            "--engine sglang --launch starts SGLang with the planned flags: give --gpu (or "
            "--gpu-memory-gib) so that kvwise can plan them"
        )
    return sglang_engine(
        list(planned.sglang_args), planned.tensor_parallel_size, args.engine_command
    )


def start_engines(args: argparse.Namespace, planned: PlannedLimits | None = None) -> Started:
    if args.demo:
        from kvwise.gateway.demo import start_demo

        return start_demo(args)
    if args.launch:
        if not args.model:
            raise UsageError("--launch needs a MODEL to serve")
        from kvwise.gateway.launcher import Supervisor, plan_launches

        engine = engine_command(args, planned)
        # several replicas split the visible GPUs into groups of TP x PP; one uses them all
        per_replica = engine.gpus_per_replica
        gpu_ids = list(range(args.replicas * per_replica)) if args.replicas > 1 else None
        launches = plan_launches(
            args.model, engine, args.replicas, engine.template, args.log_dir, gpu_ids
        )
        supervisor = Supervisor(launches)
        print(
            f"kvwise serve: starting {len(launches)} replica(s); logs in {args.log_dir}/",
            file=sys.stderr,
        )
        supervisor.start_and_wait(timeout_s=900)
        local = args.model if Path(args.model).is_dir() else None
        return Started([launch.url for launch in launches], supervisor, args.tokenizer or local)
    if not args.upstream and not args.upstream_dns:
        raise UsageError(
            "give --upstream URL (a running server), --upstream-dns NAME:PORT, --launch with a "
            "MODEL, or --demo"
        )
    for url in args.upstream:
        check_upstream_url(url)
    return Started(list(args.upstream), None, args.tokenizer)


def check_upstream_url(url: str) -> None:
    """http:// or https:// (certificates verified: the system's store, SSL_CERT_FILE or
    --upstream-ca); anything else is refused before a byte is sent."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("http", "https"):
        raise UsageError(
            f"--upstream {url}: give an http:// or https:// URL (e.g. http://127.0.0.1:8001)"
        )


def dns_replicas(args: argparse.Namespace) -> tuple[DnsTarget | None, list[str]]:
    """--upstream-dns's target and what it resolves to now (the limits may be read there)."""
    if not args.upstream_dns:
        return None, []
    import asyncio

    from kvwise.gateway.replica_dns import resolve_urls

    target = dns_target(args.upstream_dns, args.dns_server)
    return target, sorted(asyncio.run(resolve_urls(target)) or ())


def build_config(
    args: argparse.Namespace,
    urls: list[str],
    limits: Limits,
    tokenizer: str | None,
    dns: DnsTarget | None = None,
) -> GatewayConfig:
    store = args.admission_store
    if store is not None and not store.startswith(("redis://", "rediss://", "unix://")):
        raise UsageError(f"--admission-store {store}: give a redis:// URL")
    upstreams = tuple(
        UpstreamSpec(f"r{i}", url, limits.kv_budget_tokens, limits.max_num_seqs)
        for i, url in enumerate(urls)
    )
    return GatewayConfig(
        upstreams=upstreams,
        max_model_len=limits.max_model_len,
        admission=AdmissionConfig(args.max_queue, args.queue_timeout, args.admission_store),
        security=security_config(args),
        sessions=session_config(args),
        tokenizer_path=tokenizer,
        upstream_api_key=args.upstream_api_key,
        upstream_ca=args.upstream_ca,
        server=server_limits(args),
        health_timeout_s=args.health_timeout,
        health_failures=args.health_failures,
        stall_timeout_s=args.stall_timeout,
        membership=MembershipConfig(
            limits.kv_budget_tokens, limits.max_num_seqs, dns, args.dns_interval
        ),
        routing=args.routing,
        routing_prior=routing_prior(args),
    )


def routing_prior(args: argparse.Namespace) -> tuple[float, float, float] | None:
    """The cost router's prior from the simulator's step model, for MODEL on --gpu (the user's
    calibration when there is one); None without both, or for another policy."""
    if args.routing != "cost" or not args.model or not (args.gpu or args.gpu_memory_gib):
        return None
    from kvwise.core.catalog import load_model
    from kvwise.core.gpus import resolve_gpu
    from kvwise.gateway.cost_routing import prior_from_step_weights
    from kvwise.sim.deploy import deployment
    from kvwise.sim.steptime import step_weights

    gpu = resolve_gpu(args.gpu, args.gpu_memory_gib, detect=False)
    deployed = deployment(load_model(args.model), gpu, flags_from_args(args))
    return prior_from_step_weights(step_weights(deployed.config.cost, deployed.config.coefficients))


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    _positive(
        args,
        "kv_budget_tokens",
        "max_queue",
        "queue_timeout",
        "replicas",
        "max_body_bytes",
        "rate_limit",
        "max_head_bytes",
        "max_headers",
        "head_timeout",
        "body_timeout",
        "keep_alive_timeout",
        "max_connections",
        "max_auth_failures",
        "auth_failure_window",
        "stall_timeout",
        "health_timeout",
        "health_failures",
        "dns_interval",
    )
    if args.api_keys_file:
        read_keys_file(args.api_keys_file)  # a bad keys file: one line and exit 2, before all else
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.upstream_ca is not None:
        tls_context(args.upstream_ca)  # a missing or unreadable file: one line, before any work
    planned = plan_limits(args)
    started = start_engines(args, planned)
    try:
        dns, found = dns_replicas(args)
        explicit = args.kv_budget_tokens and args.max_model_len not in (None, -1)
        if not started.urls and not found and planned is None and not explicit:
            raise UsageError(f"--upstream-dns {args.upstream_dns}: no replica resolves yet; "
                             "pass MODEL and --gpu to start before they do")  # fmt: skip
        limits = discover_limits(args, planned, started.urls + found)
        config = build_config(args, started.urls, limits, started.tokenizer_path, dns)
        check_store_durability(args)
        print_limits(describe(config, limits, args), args.json)
        serve(config, args.host, args.port, started.supervisor)
    finally:
        if started.supervisor is not None:
            started.supervisor.stop()
    return 0


def check_store_durability(args: argparse.Namespace) -> None:
    """Redis persists as configured: say so at start when acknowledged turns can be lost."""
    if not args.session_store.startswith(("redis://", "rediss://", "unix://")):
        return  # SQLite: WAL with synchronous=FULL, every turn on disk before it is acknowledged
    from kvwise.gateway.redis_store import durability_problem

    problem = durability_problem(args.session_store)
    if problem is None:
        return
    if args.session_store_durable:
        raise UsageError(f"--session-store-durable: the Redis session store {problem}")
    print(f"kvwise serve: warning: the Redis session store {problem}", file=sys.stderr, flush=True)


def serve(config: GatewayConfig, host: str, port: int, supervisor: Any) -> None:
    from kvwise.gateway.app import create_app
    from kvwise.gateway.server_limits import uvicorn_config

    app = create_app(config, supervisor=supervisor)
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it to the handler it found: make
    # that one an exit, so the launched replicas are stopped on the way out (cli.run's finally)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    limits = config.server
    server = uvicorn.Server(
        uvicorn_config(app, host, port, limits, log_level="warning", access_log=False)
    )
    server.run()


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
