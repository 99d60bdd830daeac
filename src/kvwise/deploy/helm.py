"""`--target helm`: values.yaml for the vLLM production-stack chart `vllm-stack` (pinned below).

One `modelSpec` per replica (replicaCount 1), so each replica gets its own Service
(`<release>-<modelSpec.name>-engine-service`, helm/templates/service-vllm.yaml) and the gateway
one upstream per replica. The chart turns five `vllmConfig` keys into flags
(helm/templates/deployment-vllm-multi.yaml); every other planned flag goes to `extraArgs`, so
each appears once. The chart always writes `--enable-prefix-caching` or its `--no-` form, so
`enablePrefixCaching` carries the plan's value. The chart's router is off; the kvwise gateway
and Redis go in `extraObjects`, which the chart renders as they are
(helm/templates/extra-objects.yaml).
"""

from __future__ import annotations

import shlex
from typing import Any

from kvwise.deploy.artefacts import Artefact, Rendered
from kvwise.deploy.gateway_image import dockerfile
from kvwise.deploy.k8s import image_step, secret_step
from kvwise.deploy.k8s_gateway import GATEWAY_NAME, gateway_objects
from kvwise.deploy.k8s_redis import redis_objects, redis_url
from kvwise.deploy.k8s_vllm import SHM_SIZE
from kvwise.deploy.probes import engine_probes
from kvwise.deploy.spec import (
    GATEWAY_PORT,
    HF_TOKEN_KEY,
    HF_TOKEN_SECRET,
    VLLM_IMAGE,
    VLLM_PORT,
    DeploySpec,
)
from kvwise.deploy.yaml_text import dump

CHART_VERSION = "0.1.12"  # helm/Chart.yaml of vllm-project/production-stack at a6c01db (2026-08)
CHART_REPO = "https://vllm-project.github.io/production-stack"
# vllmConfig key -> the flag the chart's template writes for it
CHART_FLAGS = {
    "--max-model-len": "maxModelLen",
    "--dtype": "dtype",
    "--tensor-parallel-size": "tensorParallelSize",
    "--max-num-seqs": "maxNumSeqs",
    "--gpu-memory-utilization": "gpuMemoryUtilization",
}
_INTEGER_KEYS = ("maxModelLen", "tensorParallelSize", "maxNumSeqs")


def vllm_config(spec: DeploySpec, enable_prefix_caching: bool) -> dict[str, Any]:
    """The chart's keys for the flags it knows; the rest of the engine args in order."""
    config: dict[str, Any] = {"enablePrefixCaching": enable_prefix_caching}
    extra: list[str] = []
    args = list(spec.engine_args)
    while args:
        flag = args.pop(0)
        if flag in CHART_FLAGS and args:
            key, value = CHART_FLAGS[flag], args.pop(0)
            config[key] = int(value) if key in _INTEGER_KEYS else value
        elif flag not in ("--enable-prefix-caching", "--no-enable-prefix-caching"):
            extra.append(flag)
    config["gpuMemoryUtilization"] = float(config["gpuMemoryUtilization"])
    return {**config, "extraArgs": extra} if extra else config


def _model_spec(spec: DeploySpec, name: str, config: dict[str, Any]) -> dict[str, Any]:
    res = spec.resources
    return {
        "name": name,
        "repository": VLLM_IMAGE,
        "tag": f"v{spec.vllm_version}",
        "modelURL": spec.model_id,
        "replicaCount": 1,
        "requestCPU": res.cpu_request,
        "limitCPU": res.cpu_limit,
        "requestMemory": f"{res.memory_request_gib}Gi",
        "limitMemory": f"{res.memory_limit_gib}Gi",
        "requestGPU": res.num_gpus,
        "pvcStorage": f"{res.cache_gib}Gi",
        "pvcAccessMode": ["ReadWriteOnce"],
        "shmSize": SHM_SIZE,
        "hf_token": {"secretName": HF_TOKEN_SECRET, "secretKey": HF_TOKEN_KEY},
        "vllmConfig": config,
    }


def engine_services(spec: DeploySpec, release: str) -> list[str]:
    return [f"http://{release}-{name}-engine-service:{VLLM_PORT}" for name in spec.replica_names]


def helm_values(spec: DeploySpec, enable_prefix_caching: bool) -> dict[str, Any]:
    release = spec.options.name
    config = vllm_config(spec, enable_prefix_caching)
    upstreams = engine_services(spec, release)
    return {
        "servingEngineSpec": {
            "enableEngine": True,
            "containerPort": VLLM_PORT,
            "servicePort": VLLM_PORT,
            **engine_probes(VLLM_PORT, spec.startup),
            "modelSpec": [_model_spec(spec, name, config) for name in spec.replica_names],
        },
        "routerSpec": {"enableRouter": False},
        "extraObjects": [*redis_objects(), *gateway_objects(spec, upstreams, redis_url())],
    }


def render_helm(spec: DeploySpec, out_dir: str, enable_prefix_caching: bool) -> Rendered:
    header = (
        f"# vLLM production-stack chart vllm-stack {CHART_VERSION} ({CHART_REPO})\n"
        f"# written by kvwise deploy for {spec.model_id}, vLLM {spec.vllm_version}\n"
    )
    values = header + dump(helm_values(spec, enable_prefix_caching))
    release, out = spec.options.name, shlex.quote(out_dir)
    steps = (
        secret_step(is_optional=False),  # the chart's secretKeyRef is not optional
        image_step(spec, out_dir),
        f"helm repo add vllm {CHART_REPO}",
        f"helm install {release} vllm/vllm-stack --version {CHART_VERSION} -f {out}/values.yaml",
        f"kubectl port-forward service/{GATEWAY_NAME} {GATEWAY_PORT}:{GATEWAY_PORT}",
    )
    artefacts = (Artefact("values.yaml", values), Artefact("gateway.Dockerfile", dockerfile()))
    return Rendered(artefacts, steps)
