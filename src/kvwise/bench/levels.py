"""A bench: discover the server, then one run per concurrency level, each with /metrics around it."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import replace

import httpx

from kvwise.bench.driver import Target, run_workload
from kvwise.bench.prompts import SegmentTexts
from kvwise.bench.records import RequestRecord
from kvwise.bench.results import RunResult, ServerInfo
from kvwise.bench.summary import summarize
from kvwise.errors import UpstreamError, UsageError
from kvwise.live.metrics import GaugeSampler, scrape, server_report
from kvwise.sim.workloads import Workload, WorkloadSpec, build_workload

METRICS_SETTLE_S = 0.3  # vLLM's API server folds the last step's stats in just after the answer


async def discover(base_url: str, model: str | None, api_key: str | None) -> ServerInfo:
    """The served model (the one asked for, else the only/first one) and whether it is vLLM."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(headers=headers, timeout=10.0) as client:
        try:
            response = await client.get(f"{base_url}/v1/models")
        except httpx.HTTPError as exc:
            raise UpstreamError(f"{base_url}: cannot reach the server ({exc})") from exc
        if response.status_code != 200:
            raise UpstreamError(f"{base_url}/v1/models answered {response.status_code}")
        served = [m for m in response.json().get("data", []) if isinstance(m, dict)]
        snapshot = await scrape(client, base_url)
    names = [str(m.get("id")) for m in served]
    if model is None and not names:
        raise UpstreamError(f"{base_url}/v1/models lists no model; pass --served-model-name")
    chosen = model or names[0]
    if names and chosen not in names:
        raise UsageError(f"the server serves {', '.join(names)}, not {chosen!r}")
    card = next((m for m in served if m.get("id") == chosen), {})
    root, max_len = card.get("root"), card.get("max_model_len")
    return ServerInfo(
        url=base_url,
        model=chosen,
        model_root=str(root) if root else None,
        max_model_len=max_len if isinstance(max_len, int) and max_len > 0 else None,
        backend="vllm" if snapshot is not None else "openai",
        cache_config=snapshot.cache_config if snapshot else {},
    )


def level_workload(spec: WorkloadSpec, max_concurrency: int | None, seed: int) -> Workload:
    """The workload of one run: the same sessions at every level (same seed), another cap."""
    return build_workload(replace(spec, max_concurrency=max_concurrency), random.Random(seed))


async def run_level(
    target: Target,
    workload: Workload,
    texts: SegmentTexts,
    on_record: Callable[[RequestRecord], None],
    request_rate: float | None = None,
) -> RunResult:
    async with httpx.AsyncClient(headers=target.headers(), timeout=10.0) as client:
        before = await scrape(client, target.base_url)
        sampler = GaugeSampler(client, target.base_url) if before is not None else None
        stop = asyncio.Event()
        sampling = asyncio.create_task(sampler.run(stop)) if sampler else None
        try:
            records = await run_workload(target, workload, texts, on_record)
        finally:
            stop.set()
            if sampling is not None:
                await sampling
        await asyncio.sleep(METRICS_SETTLE_S if before is not None else 0.0)
        after = await scrape(client, target.base_url)
    return RunResult(
        max_concurrency=workload.max_concurrency,
        request_rate=request_rate,
        metrics=summarize(records),
        server_metrics=server_report(before, after, sampler),
        requests=records,
    )
