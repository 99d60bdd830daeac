"""Kubernetes objects of Redis, the gateway's session store: one pod with the append-only file
on (`--appendonly yes --appendfsync everysec`: at most one second of writes lost on a crash,
redis.io/docs/latest/operate/oss_and_stack/management/persistence) on a PersistentVolumeClaim.
"""

from __future__ import annotations

from typing import Any

from kvwise.deploy.spec import REDIS_IMAGE, REDIS_PORT

REDIS_NAME = "kvwise-redis"
REDIS_STORAGE = "1Gi"  # sessions are text: the gateway caps each at --session-max-bytes (16 MiB)


def redis_url() -> str:
    """The Redis service, without a database: the gateway keeps sessions in 0, its budget in 1."""
    return f"redis://{REDIS_NAME}:{REDIS_PORT}"


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": REDIS_NAME, "app.kubernetes.io/part-of": "kvwise"}


def _deployment() -> dict[str, Any]:
    ping = {"exec": {"command": ["redis-cli", "ping"]}, "periodSeconds": 10}
    container = {
        "name": "redis",
        "image": REDIS_IMAGE,
        "args": [
            "redis-server",
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--dir",
            "/data",
        ],
        "ports": [{"name": "redis", "containerPort": REDIS_PORT}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "readinessProbe": ping,
        "livenessProbe": ping,
    }
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": REDIS_NAME}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": REDIS_NAME, "labels": _labels()},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # one writer on a ReadWriteOnce volume
            "selector": {"matchLabels": _labels()},
            "template": {
                "metadata": {"labels": _labels()},
                "spec": {"containers": [container], "volumes": [volume]},
            },
        },
    }


def redis_objects() -> list[dict[str, Any]]:
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": REDIS_NAME, "labels": _labels()},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": REDIS_STORAGE}},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": REDIS_NAME, "labels": _labels()},
        "spec": {"selector": _labels(), "ports": [{"name": "redis", "port": REDIS_PORT}]},
    }
    return [claim, _deployment(), service]
