"""Kubernetes objects of the kvwise gateway: a Deployment of `kvwise serve` (two or more pods,
each pointed at every vLLM replica, sessions in Redis), its Service and a PodDisruptionBudget
that keeps one pod serving through node drains.

With plain manifests the gateway finds the replicas through their headless Service's DNS name
(`--upstream-dns`): a replica added later joins once healthy, one deleted is drained first.
"""

from __future__ import annotations

from typing import Any

from kvwise.deploy.probes import gateway_probes
from kvwise.deploy.spec import GATEWAY_PORT, DeploySpec

GATEWAY_NAME = "kvwise-gateway"


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": GATEWAY_NAME, "app.kubernetes.io/part-of": "kvwise"}


def gateway_args(
    spec: DeploySpec, upstreams: list[str], redis_url: str | None, upstream_dns: str | None = None
) -> list[str]:
    """`kvwise serve` arguments: the plan it budgets with, every replica (or the DNS name that
    lists them), and with Redis the sessions (database 0) and one KV budget shared by every
    gateway pod (database 1)."""
    args = [spec.model_id, *spec.gateway_plan_args]
    for url in upstreams:
        args += ["--upstream", url]
    if upstream_dns is not None:
        args += ["--upstream-dns", upstream_dns]
    args += ["--host", "0.0.0.0", "--port", str(GATEWAY_PORT), "--session-history"]
    if redis_url is None:
        return args  # one gateway, sessions in its own SQLite file
    return [*args, "--session-store", f"{redis_url}/0", "--admission-store", f"{redis_url}/1"]


def _deployment(spec: DeploySpec, args: list[str]) -> dict[str, Any]:
    container = {
        "name": "gateway",
        "image": spec.options.gateway_image,
        "command": ["kvwise", "serve"],
        "args": args,
        "ports": [{"name": "http", "containerPort": GATEWAY_PORT}],
        **gateway_probes(GATEWAY_PORT),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": GATEWAY_NAME, "labels": _labels()},
        "spec": {
            "replicas": spec.options.num_gateways,
            "selector": {"matchLabels": _labels()},
            "template": {"metadata": {"labels": _labels()}, "spec": {"containers": [container]}},
        },
    }


def _service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": GATEWAY_NAME, "labels": _labels()},
        "spec": {
            "selector": _labels(),
            "ports": [{"name": "http", "port": GATEWAY_PORT, "targetPort": "http"}],
        },
    }


def _disruption_budget() -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": GATEWAY_NAME, "labels": _labels()},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": _labels()}},
    }


def gateway_objects(
    spec: DeploySpec, upstreams: list[str], redis_url: str, upstream_dns: str | None = None
) -> list[dict[str, Any]]:
    args = gateway_args(spec, upstreams, redis_url, upstream_dns)
    return [_deployment(spec, args), _service(), _disruption_budget()]
