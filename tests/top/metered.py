"""A fake upstream whose /metrics carries what a busy vLLM engine exports (vLLM 0.32.0 names):
KV use, preemptions, a TTFT histogram, token counters. Tests set the figures between scrapes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tests.fake_upstream import Behaviour, FakeUpstream
from tests.gateway.servers import LoopThread

TTFT_BOUNDS_S = (0.01, 0.05, 0.1, 0.5, 1.0)


def engine_text(
    kv_usage: float,
    pool_tokens: int,
    num_preemptions: int = 0,
    ttft_counts: tuple[int, ...] = (0, 0, 0, 0, 0, 0),  # per bucket, the last one is +Inf
    generation_tokens: int = 0,
    running: int = 0,
    waiting: int = 0,
) -> str:
    lines = [
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}.0',
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}.0',
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv_usage}',
        f'vllm:cache_config_info{{block_size="16",num_gpu_blocks="{pool_tokens // 16}"}} 1.0',
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {num_preemptions}.0',
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {generation_tokens}.0',
    ]
    cumulative = 0
    for bound, count in zip((*TTFT_BOUNDS_S, "+Inf"), ttft_counts, strict=True):
        cumulative += count
        le = bound if isinstance(bound, str) else f"{bound}"
        lines.append(
            f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{le}",model_name="m"}} '
            f"{cumulative}.0"
        )
    lines.append(
        f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="m"}} {cumulative}.0'
    )
    return "\n".join(lines) + "\n"


class MeteredUpstream(FakeUpstream):
    def __init__(self, behaviour: Behaviour | None = None) -> None:
        super().__init__(behaviour, name="metered")
        self.metrics_text = engine_text(0.0, self.behaviour.pool_tokens)

    def _get(self, path: str) -> tuple[int, bytes, str]:
        if path == "/metrics":
            return 200, self.metrics_text.encode(), "text/plain"
        return super()._get(path)


@contextmanager
def metered_upstream(behaviour: Behaviour | None = None) -> Iterator[tuple[str, MeteredUpstream]]:
    loop = LoopThread()
    server = MeteredUpstream(behaviour)
    try:
        port = loop.run(server.start())
        yield f"http://127.0.0.1:{port}", server
    finally:
        loop.run(server.stop())
        loop.close()
