"""A stand-in for an SGLang server's HTTP side, for `kvwise top`: SGLang has no CPU build (its
PyPI wheel is CUDA-only, no CPU kernels in sglang-kernel), so it cannot run on this machine.

Run as its own process (`python tests/top/fake_sglang.py PORT [--enable-metrics]`), it serves
/metrics the way SGLang 0.5.23 does (the sglang==0.5.23 wheel from PyPI, python/sglang/srt/...):

* PROMETHEUS_MULTIPROC_DIR is set before prometheus_client is imported
  (utils/common.py `set_prometheus_multiproc_dir`), so the text is prometheus_client's
  multiprocess rendering, as SGLang's is;
* the series are declared with SGLang's names, help texts, label names, multiprocess modes and
  buckets (observability/metrics_collector.py: `SchedulerMetricsCollector`,
  `TokenizerMetricsCollector`), labelled as `SchedulerMetricsCollector.init_new` and
  `tokenizer_metric_labels` label them (model_name, engine_type "unified", tp/pp/moe_ep rank;
  is_streaming on the per-request series);
* /metrics is prometheus_client's `make_asgi_app` over a `MultiProcessCollector` registry,
  mounted only with --enable-metrics (utils/common.py `add_prometheus_middleware`,
  entrypoints/http_server.py); /model_info answers with SGLang's field names either way.

The figures are set by the test through POST /fake/set (not an SGLang route): gauges are set,
`retracted`, `prompt_tokens` and `generation_tokens` added to the counters, and `ttft_s` /
`tpot_s` values observed in the histograms, as SGLang's scheduler and tokenizer manager do.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile

MODEL = "Qwen/Qwen2.5-7B-Instruct"


def main(port: int, enable_metrics: bool) -> None:
    multiproc = tempfile.TemporaryDirectory()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = multiproc.name  # before prometheus_client loads
    import uvicorn
    from prometheus_client import (
        CollectorRegistry,
        Counter,
        Gauge,
        Histogram,
        make_asgi_app,
        multiprocess,
    )
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Mount, Route

    labels = {"model_name": MODEL, "engine_type": "unified", "tp_rank": 0, "pp_rank": 0,
              "moe_ep_rank": 0}  # fmt: skip
    tokenizer = {"model_name": MODEL, "engine_type": "unified"}
    streaming = {**tokenizer, "is_streaming": "true"}

    def gauge(name: str, documentation: str, mode: str | None = "mostrecent") -> Gauge:
        kwargs = {"multiprocess_mode": mode} if mode else {}
        return Gauge(name=name, documentation=documentation, labelnames=labels.keys(), **kwargs)

    gauges = {
        "num_running_reqs": gauge("sglang:num_running_reqs", "The number of running requests."),
        "num_queue_reqs": gauge(
            "sglang:num_queue_reqs", "The number of requests in the waiting queue."
        ),
        "gen_throughput": gauge("sglang:gen_throughput", "The generation throughput (token/s)."),
        "cache_hit_rate": gauge("sglang:cache_hit_rate", "The prefix cache hit rate."),
        "token_usage": gauge("sglang:token_usage", "The token usage."),
        "num_used_tokens": gauge("sglang:num_used_tokens", "The number of used tokens."),
        "kv_available_tokens": gauge(
            "sglang:kv_available_tokens", "Number of free token slots in the KV cache pool."
        ),
        "kv_evictable_tokens": gauge(
            "sglang:kv_evictable_tokens",
            "Number of evictable (radix-cached) token slots in the KV cache pool.",
        ),
        "kv_used_tokens": gauge(
            "sglang:kv_used_tokens", "Number of actively used token slots in the KV cache pool."
        ),
        "new_token_ratio": gauge("sglang:new_token_ratio", "The new token ratio."),
        # metrics_collector.py declares this one without a multiprocess mode: "all", one per pid
        "num_retracted_reqs": gauge(
            "sglang:num_retracted_reqs", "The number of retracted requests.", mode=None
        ),
        "max_total_num_tokens": gauge(
            "sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."
        ),
    }
    retracted = Counter(
        name="sglang:num_retracted_requests_total",
        documentation="Total number of retracted requests.",
        labelnames=labels.keys(),
    )
    prompt_tokens = Counter(
        name="sglang:prompt_tokens_total",
        documentation="Number of prefill tokens processed.",
        labelnames=[*tokenizer.keys(), "is_streaming"],
    )
    generation_tokens = Counter(
        name="sglang:generation_tokens_total",
        documentation="Number of generation tokens processed.",
        labelnames=[*tokenizer.keys(), "is_streaming"],
    )
    ttft = Histogram(
        name="sglang:time_to_first_token_seconds",
        documentation="Histogram of time to first token in seconds.",
        labelnames=[*tokenizer.keys(), "is_streaming"],
        buckets=[0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400],
    )
    itl_buckets = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
                   0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000,
                   8.000]  # fmt: skip
    Histogram(
        name="sglang:inter_token_latency_seconds",
        documentation="Histogram of inter-token latency in seconds.",
        labelnames=tokenizer.keys(),
        buckets=itl_buckets,
    ).labels(**tokenizer)
    tpot = Histogram(
        name="sglang:request_time_per_output_token_seconds",
        documentation=(
            "Per-request TPOT in seconds: (finished_time - first_token_time) / "
            "(completion_tokens - 1)."
        ),
        labelnames=[*tokenizer.keys(), "is_streaming"],
        buckets=itl_buckets,
    )
    for g in gauges.values():
        g.labels(**labels).set(0)
    retracted.labels(**labels)
    prompt_tokens.labels(**streaming)
    generation_tokens.labels(**streaming)
    ttft.labels(**streaming)
    tpot.labels(**streaming)

    async def set_figures(request: Request) -> JSONResponse:
        body = await request.json()
        for name, value in body.get("gauges", {}).items():
            gauges[name].labels(**labels).set(value)
        retracted.labels(**labels).inc(body.get("retracted", 0))
        prompt_tokens.labels(**streaming).inc(body.get("prompt_tokens", 0))
        generation_tokens.labels(**streaming).inc(body.get("generation_tokens", 0))
        for value in body.get("ttft_s", []):
            ttft.labels(**streaming).observe(value)
        for value in body.get("tpot_s", []):
            tpot.labels(**streaming).observe(value)
        return JSONResponse({"ok": True})

    async def model_info(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "model_path": MODEL,
                "served_model_name": MODEL,
                "tokenizer_path": MODEL,
                "is_generation": True,
                "model_type": "qwen2",
                "architectures": ["Qwen2ForCausalLM"],
            }
        )

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({})

    routes = [
        Route("/fake/set", set_figures, methods=["POST"]),
        Route("/model_info", model_info),
        Route("/health", health),
    ]
    app = Starlette(routes=routes)
    if enable_metrics:  # add_prometheus_middleware, as SGLang mounts it
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        metrics_route = Mount("/metrics", make_asgi_app(registry=registry))
        metrics_route.path_regex = re.compile("^/metrics(?P<path>.*)$")
        app.routes.append(metrics_route)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(int(sys.argv[1]), "--enable-metrics" in sys.argv[2:])
