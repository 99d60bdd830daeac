"""`--target k8s`: plain manifests, one file per component, applied with `kubectl apply -f DIR`."""

from __future__ import annotations

import shlex

from kvwise.deploy.artefacts import Artefact, Rendered
from kvwise.deploy.gateway_image import dockerfile
from kvwise.deploy.k8s_gateway import GATEWAY_NAME, gateway_objects
from kvwise.deploy.k8s_redis import redis_objects, redis_url
from kvwise.deploy.k8s_vllm import headless_name, vllm_objects
from kvwise.deploy.spec import GATEWAY_PORT, HF_TOKEN_KEY, HF_TOKEN_SECRET, DeploySpec
from kvwise.deploy.yaml_text import dump_all


def secret_step(is_optional: bool = True) -> str:
    when = "gated models only" if is_optional else "the chart requires it, even for public models"
    return (
        f"kubectl create secret generic {HF_TOKEN_SECRET} "
        f'--from-literal={HF_TOKEN_KEY}="$HF_TOKEN"   # {when}'
    )


def image_step(spec: DeploySpec, out_dir: str) -> str:
    image = shlex.quote(spec.options.gateway_image)
    dockerfile = f"{shlex.quote(out_dir)}/gateway.Dockerfile"
    return f"docker build -t {image} -f {dockerfile} .   # in kvwise's source tree; push it"


def render_k8s(spec: DeploySpec, out_dir: str) -> Rendered:
    gateway = gateway_objects(spec, [], redis_url(), upstream_dns=headless_name(spec))
    artefacts = (
        Artefact(f"{spec.engine}.yaml", dump_all(vllm_objects(spec))),
        Artefact("redis.yaml", dump_all(redis_objects())),
        Artefact("gateway.yaml", dump_all(gateway)),
        Artefact("gateway.Dockerfile", dockerfile()),
    )
    wait_s = round(spec.startup.total_s)
    steps = (
        secret_step(),
        image_step(spec, out_dir),
        f"kubectl apply -f {shlex.quote(out_dir)}",
        *(
            f"kubectl rollout status deployment/{name} --timeout={wait_s}s"
            for name in spec.replica_names
        ),
        f"kubectl port-forward service/{GATEWAY_NAME} {GATEWAY_PORT}:{GATEWAY_PORT}",
    )
    return Rendered(artefacts, steps)
