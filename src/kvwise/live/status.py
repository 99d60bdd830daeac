"""The status document: what the gateway's GET /kvwise/status serves and what `kvwise top`
composes from engines it polls itself, one shape for both (docs/top.md)."""

from __future__ import annotations

import time
from typing import Any

from kvwise.live.host import host_memory
from kvwise.live.plan_check import departures


def status_document(
    source: str,
    replicas: list[dict[str, Any]],
    gateway: dict[str, Any] | None,
    gpu_memory: list[dict[str, Any]],
) -> dict[str, Any]:
    """`source` is "gateway" or "engines"; `gpu_memory` the local GPUs' (kvwise.core.gpus)."""
    return {
        "source": source,
        "time_s": round(time.time(), 3),
        "replicas": replicas,
        "gateway": gateway,
        "host": {"memory": host_memory(), "gpus": gpu_memory},
        "departures": departures(replicas),
    }
