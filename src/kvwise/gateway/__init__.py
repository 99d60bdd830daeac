"""`kvwise serve`: an OpenAI-compatible gateway that keeps vLLM inside its KV-cache plan.

Public API (what other capabilities and tests use):
    create_app(GatewayConfig, supervisor=None) -> ASGI app      kvwise.gateway.app
    GatewayConfig, SecurityConfig, SessionConfig, UpstreamSpec   kvwise.gateway.config
    run(argv) -> int                                            kvwise.gateway.cli (the command)

How a request flows, module by module:
    server_limits  head size/count caps, head/body deadlines (a uvicorn protocol subclass)
    security    API keys, admin keys, failed-attempt throttling, rate limits, the caller's tenant
      keys_file   the API keys file (YAML): names, limits, reloaded when it changes
      tenants     per-key rate and concurrency limits at the door, counted per key name
    asgi        raw ASGI helpers: capped body read, JSON errors, disconnect detection
    schemas     pydantic request bodies (unknown OpenAI fields pass through)
    prepare     validate, rebuild and trim session history, count tokens, KV cost, 400s
      tokens      prompt-token bounds: tokenizer.json, else UTF-8 bytes
      history     trimming that never separates a tool call from its results
      merge       lining up a resent / edited conversation with the stored one
      sessions    session store interface + SQLite (WAL); redis_store: Redis (+ durability)
    admission   KV-token leases on replicas, the fair queue, 429 + Retry-After
      admission_redis  one budget for several gateways (--admission-store): Redis leases;
                  admission_scripts: its atomic Lua scripts
      fairqueue   start-time fair queuing across sessions / API keys, in KV tokens
      routing     consistent hashing with bounded loads (session / prefix affinity)
      cost_routing  least predicted TTFT (queue + uncached prompt), round robin
      replicas    per-replica budget, reservations, live engine load from /metrics
      membership  replicas that join (DNS, admin) after a passing health check, drained out
        replica_dns   a headless Service's records resolved to replica URLs
        replica_admin /kvwise/replicas: list, add, drain (admin key)
    endpoint    the exchange: relay (streaming or not), failover before the first token,
                a clean SSE error after it; sse: event splitting and reply collection
      upstream_stream  an upstream stream held back to its first token (failover up to there)
      upstream_http  the one HTTP client to the engines: relay, probes, scrapes; TLS verified
      forwarding  which client headers reach the engine
      internal_error  the gateway's own failures: a counted, logged 500 with a request id
    app         the Gateway state, health loop, routes; metrics: /metrics (prometheus_client);
                openapi: the request schemas as an OpenAPI document
    status      GET /kvwise/status: the live figures `kvwise top` and the page share (docs/top.md)
    ui          GET /ui: the live page (assets/ shipped in the package)
    launcher    vLLM replicas: ports, GPU groups, logs, readiness, restart with back-off
    discovery   limits from flags, the plan, or the running engine; demo: SmolLM2 on CPU
    startup_summary  what `kvwise serve` prints at start
"""
