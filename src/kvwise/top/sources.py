"""Where `kvwise top` reads: a `kvwise serve` gateway's /kvwise/status, or vLLM engines' /metrics.

A URL is a gateway when it answers /kvwise/status, an engine when its /metrics has vLLM's
series. Engines read directly are windowed here as the gateway does it (`window`); their
planned pool is `--planned-kv-tokens` when given (no plan is known otherwise).
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


class Unreachable(Exception):
    """The URL did not answer (refused, timed out, DNS); the message is one line."""


@dataclass
class Source:
    url: str
    is_gateway: bool
    planned_pool_tokens: int | None = None
    window: EngineWindow = field(default_factory=EngineWindow)


def _get(client: httpx.Client, url: str, headers: dict[str, str]) -> httpx.Response:
    try:
        return client.get(url, headers=headers, timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        raise Unreachable(f"{url}: {reason}") from None


def detect(client: httpx.Client, url: str, headers: dict[str, str], planned: int | None) -> Source:
    """A gateway or an engine; UsageError (one line) for anything else, or no answer at all."""
    base = url.rstrip("/")
    try:
        status = _get(client, f"{base}/kvwise/status", headers)
        if status.status_code == 200:
            return Source(base, True)
        if status.status_code in (401, 403):
            raise UsageError(f"{base}/kvwise/status needs an admin key: pass --admin-key KEY")
        metrics = _get(client, f"{base}/metrics", headers)
    except Unreachable as exc:
        raise UsageError(f"cannot reach {exc} (is `kvwise serve` or vLLM running there?)") from None
    if metrics.status_code == 200 and "vllm:" in metrics.text:
        return Source(base, False, planned)
    raise UsageError(
        f"{base} is neither a `kvwise serve` gateway nor a vLLM engine (no vllm: metrics)"
    )


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
