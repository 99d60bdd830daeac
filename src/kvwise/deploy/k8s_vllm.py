"""Kubernetes objects of the engine replicas (vLLM, or SGLang with `--engine sglang`): one
Deployment and model-cache PVC per replica, and a headless Service whose name lists every ready
replica (one A record per pod): the gateway resolves it (`--upstream-dns vllm:8000`) to find
replicas as they come and go. Each replica also has a stable name of its own (`vllm-0.vllm:8000`).

One Deployment per replica (replicas: 1, strategy Recreate: a GPU cannot surge) with
`hostname`/`subdomain` set, so DNS resolves `<hostname>.<service>` to that pod
(kubernetes.io/docs/concepts/services-networking/dns-pod-service, "A/AAAA records" for pods
with hostname and subdomain).
"""

from __future__ import annotations

from typing import Any

from kvwise.deploy.probes import engine_probes
from kvwise.deploy.spec import HF_TOKEN_KEY, HF_TOKEN_SECRET, VLLM_PORT, DeploySpec

CACHE_PATH = "/root/.cache/huggingface"  # HF_HOME in the official image's user (root)
# /dev/shm for NCCL and the workers' shared-memory queues; 20Gi is the production-stack chart's
# default shmSize (helm/templates/deployment-vllm-multi.yaml)
SHM_SIZE = "20Gi"


def labels(spec: DeploySpec, replica: str | None = None) -> dict[str, str]:
    found = {"app.kubernetes.io/name": spec.options.name, "app.kubernetes.io/part-of": "kvwise"}
    return {**found, "kvwise.io/replica": replica} if replica else found


# A replica being deleted keeps serving this long before vLLM gets SIGTERM: its pod leaves the
# Service's records at once, CoreDNS answers from its cache for up to 30 s (the `cache 30`
# plugin of the default Corefile) and the gateway re-resolves every 5 s, so new requests stop
# within ~35 s; the rest of the time lets the streams already running finish.
DRAIN_S = 60
TERMINATION_GRACE_S = DRAIN_S + 30  # vLLM's own shutdown after the drain


def headless_name(spec: DeploySpec) -> str:
    """NAME:PORT of the headless Service, found through the pod's DNS search domains."""
    return f"{spec.options.name}:{VLLM_PORT}"


def _container(spec: DeploySpec) -> dict[str, Any]:
    res = spec.resources
    return {
        "name": spec.engine,
        "image": spec.image,
        "command": spec.container_command,
        "args": [*spec.container_args, "--host", "0.0.0.0", "--port", str(VLLM_PORT)],
        "ports": [{"name": "http", "containerPort": VLLM_PORT}],
        "env": [
            {"name": "HF_HOME", "value": CACHE_PATH},
            {
                "name": "HF_TOKEN",
                "valueFrom": {
                    "secretKeyRef": {
                        "name": HF_TOKEN_SECRET,
                        "key": HF_TOKEN_KEY,
                        "optional": True,  # public models start without it
                    }
                },
            },
        ],
        "resources": {
            "requests": {
                "cpu": str(res.cpu_request),
                "memory": f"{res.memory_request_gib}Gi",
                "nvidia.com/gpu": str(res.num_gpus),
            },
            "limits": {
                "cpu": str(res.cpu_limit),
                "memory": f"{res.memory_limit_gib}Gi",
                "nvidia.com/gpu": str(res.num_gpus),
            },
        },
        "volumeMounts": [
            {"name": "model-cache", "mountPath": CACHE_PATH},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
        **engine_probes(VLLM_PORT, spec.startup),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(DRAIN_S)]}}},
    }


def deployment(spec: DeploySpec, replica: str) -> dict[str, Any]:
    pod_spec = {
        "hostname": replica,
        "subdomain": spec.options.name,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
        "containers": [_container(spec)],
        "volumes": [
            {"name": "model-cache", "persistentVolumeClaim": {"claimName": f"{replica}-cache"}},
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": replica, "labels": labels(spec, replica)},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels(spec, replica)},
            "template": {"metadata": {"labels": labels(spec, replica)}, "spec": pod_spec},
        },
    }


def cache_claim(spec: DeploySpec, replica: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"{replica}-cache", "labels": labels(spec, replica)},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": f"{spec.resources.cache_gib}Gi"}},
        },
    }


def headless_service(spec: DeploySpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": spec.options.name, "labels": labels(spec)},
        "spec": {
            "clusterIP": "None",
            "selector": labels(spec),
            "ports": [{"name": "http", "port": VLLM_PORT, "targetPort": "http"}],
        },
    }


def vllm_objects(spec: DeploySpec) -> list[dict[str, Any]]:
    objects = [headless_service(spec)]
    for replica in spec.replica_names:
        objects += [cache_claim(spec, replica), deployment(spec, replica)]
    return objects
