"""Where `kvwise top` reads: a `kvwise serve` gateway's /kvwise/status, or the /metrics of vLLM
or SGLang engines.

A URL is a gateway when it answers /kvwise/status, an engine when its /metrics has vLLM's
series (`vllm:`) or SGLang's (`sglang:`); which engine is told by those names, or given with
`--engine` (then a URL exporting the other's is an error). SGLang serves /metrics only when
started with `--enable-metrics` (http_server.py, sglang 0.5.23): a server without it still
answers /model_info, and is told so. Engines read directly are windowed here as the gateway
does it (`window`); their planned pool is `--planned-kv-tokens` when given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from kvwise.core import gpus
from kvwise.errors import UsageError
from kvwise.live.status import status_document
from kvwise.live.window import EngineWindow, parse_sample

TIMEOUT_S = 3.0
ENGINES = {"vllm": "vLLM", "sglang": "SGLang"}


class Unreachable(Exception):
    """The URL did not answer (refused, timed out, DNS); the message is one line."""


@dataclass
class Source:
    url: str
    is_gateway: bool
    planned_pool_tokens: int | None = None
    engine: str | None = None  # "vllm" or "sglang" for an engine read directly
    window: EngineWindow = field(default_factory=EngineWindow)


def _get(client: httpx.Client, url: str, headers: dict[str, str]) -> httpx.Response:
    try:
        return client.get(url, headers=headers, timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        raise Unreachable(f"{url}: {reason}") from None


def detect(
    client: httpx.Client,
    url: str,
    headers: dict[str, str],
    planned: int | None,
    engine: str | None = None,
) -> Source:
    """A gateway or an engine (`engine`: the one expected, None: either); UsageError (one line)
    for anything else, or no answer at all."""
    base = url.rstrip("/")
    try:
        status = _get(client, f"{base}/kvwise/status", headers)
        if status.status_code == 200:
            return Source(base, True)
        if status.status_code in (401, 403):
            raise UsageError(f"{base}/kvwise/status needs an admin key: pass --admin-key KEY")
        metrics = _get(client, f"{base}/metrics", headers)
        found = _engine_of(metrics) or _sglang_without_metrics(client, base, headers)
    except Unreachable as exc:
        raise UsageError(
            f"cannot reach {exc} (is `kvwise serve`, vLLM or SGLang running there?)"
        ) from None
    if found == "sglang-no-metrics":
        raise UsageError(
            f"{base} is an SGLang server without metrics (/metrics answered "
            f"{metrics.status_code}): restart it with --enable-metrics"
        )
    if found is None:
        raise UsageError(
            f"{base} is neither a `kvwise serve` gateway nor a vLLM or SGLang engine "
            "(no vllm: or sglang: metrics)"
        )
    if engine is not None and found != engine:
        raise UsageError(
            f"--engine {engine}: {base}/metrics has {ENGINES[found]}'s metrics ({found}:), "
            f"not {ENGINES[engine]}'s; leave --engine out to read either"
        )
    return Source(base, False, planned, engine=found)


def _engine_of(metrics: httpx.Response) -> str | None:
    """Whose metric names a /metrics answer carries (vLLM's first: a vLLM page never has
    SGLang's names)."""
    if metrics.status_code != 200:
        return None
    if "vllm:" in metrics.text:
        return "vllm"
    return "sglang" if "sglang:" in metrics.text else None


def _sglang_without_metrics(client: httpx.Client, base: str, headers: dict[str, str]) -> str | None:
    """SGLang started without --enable-metrics has no /metrics, but answers /model_info
    (its `model_path` field) as every SGLang server does."""
    info = _get(client, f"{base}/model_info", headers)
    try:
        is_sglang = info.status_code == 200 and "model_path" in info.json()
    except ValueError:
        return None
    return "sglang-no-metrics" if is_sglang else None


def poll(client: httpx.Client, sources: list[Source], headers: dict[str, str]) -> dict[str, Any]:
    """One status over all sources: the gateways' own, plus a replica per engine URL."""
    replicas: list[dict[str, Any]] = []
    gateway: dict[str, Any] | None = None
    unreachable: list[str] = []
    for source in sources:
        try:
            if source.is_gateway:
                status = _get(client, f"{source.url}/kvwise/status", headers).json()
                replicas += status.get("replicas", [])
                gateway = gateway or status.get("gateway")
            else:
                replicas.append(_engine(client, source, headers))
        except (Unreachable, ValueError) as exc:
            unreachable.append(f"{exc}; retrying")
    kind = "gateway" if any(s.is_gateway for s in sources) else "engines"
    return status_document(kind, replicas, gateway, gpus.gpu_memory()) | {
        "unreachable": unreachable
    }


def _engine(client: httpx.Client, source: Source, headers: dict[str, str]) -> dict[str, Any]:
    response = _get(client, f"{source.url}/metrics", headers)
    if response.status_code != 200:
        raise Unreachable(f"{source.url}/metrics answered {response.status_code}")
    source.window.add(parse_sample(response.text))
    figures = {"name": source.url, "url": source.url, "healthy": True}
    figures.update(source.window.figures(source.planned_pool_tokens))
    return figures
