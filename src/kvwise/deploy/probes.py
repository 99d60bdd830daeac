"""Startup, readiness and liveness probes on vLLM's `/health`.

vLLM answers `/health` with 200 once the engine runs and 503 once the engine is dead
(vllm/entrypoints/openai/api_server.py, `health`). The startup probe holds the other two off for
the load budget (startup.py); after it, readiness takes a replica out of its Service within
15 s and liveness restarts it after a minute without an answer.
"""

from __future__ import annotations

from typing import Any

from kvwise.deploy.startup import PROBE_PERIOD_S, StartupBudget

READINESS_PERIOD_S = 5
READINESS_FAILURES = 3
LIVENESS_PERIOD_S = 10
LIVENESS_FAILURES = 6


def _http(port: int, period_s: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/health", "port": port},
        "initialDelaySeconds": 1,
        "periodSeconds": period_s,
        "failureThreshold": failures,
    }


def engine_probes(port: int, budget: StartupBudget) -> dict[str, dict[str, Any]]:
    return {
        "startupProbe": _http(port, PROBE_PERIOD_S, budget.failure_threshold),
        "readinessProbe": _http(port, READINESS_PERIOD_S, READINESS_FAILURES),
        "livenessProbe": _http(port, LIVENESS_PERIOD_S, LIVENESS_FAILURES),
    }


def gateway_probes(port: int) -> dict[str, dict[str, Any]]:
    """The gateway starts in seconds: no startup probe, the same readiness and liveness."""
    return {
        "readinessProbe": _http(port, READINESS_PERIOD_S, READINESS_FAILURES),
        "livenessProbe": _http(port, LIVENESS_PERIOD_S, LIVENESS_FAILURES),
    }
