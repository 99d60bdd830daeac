"""From the command line's choices to files on disk: plan, refuse or describe, render, write."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import resolve_gpu
from kvwise.deploy.artefacts import Rendered, write
from kvwise.deploy.spec import DeployOptions, DeploySpec, from_plan, from_sglang_plan
from kvwise.errors import KvwiseError
from kvwise.planner import Plan, plan


def planned(args: argparse.Namespace, model_name: str, flags: VllmFlags) -> Plan:
    """The plan `kvwise plan` makes for the same flags; refused (exit 1) if vLLM would not start."""
    model = load_model(model_name)
    gpu = resolve_gpu(args.gpu, args.gpu_memory_gib, None)
    result = plan(model, gpu, flags, vllm_version=args.vllm_version)
    if result.error is not None:
        words = " ".join(result.error.message.split())
        raise KvwiseError(f"vLLM would not start ({result.error.kind}): {words}")
    return result


def options(args: argparse.Namespace) -> DeployOptions:
    chosen = DeployOptions(
        name=args.name,
        num_replicas=args.replicas,
        num_gateways=args.gateways,
        load_rate_mb_s=args.load_rate_mb_s,
        engine_init_s=args.engine_init_s,
    )
    return replace(chosen, gateway_image=args.gateway_image) if args.gateway_image else chosen


def render(spec: DeploySpec, args: argparse.Namespace, result: Plan) -> Rendered:
    out = str(args.out)
    if args.target == "k8s":
        from kvwise.deploy.k8s import render_k8s

        return render_k8s(spec, out)
    if args.target == "helm":
        from kvwise.deploy.helm import render_helm

        return render_helm(spec, out, result.flags.enable_prefix_caching)
    from kvwise.deploy.ray import render_ray

    return render_ray(spec, args.gpus_per_node, args.nodes)


def sglang_spec(args: argparse.Namespace, model_name: str, flags: VllmFlags) -> DeploySpec:
    """SGLang's replicas, refused (exit 1) if SGLang would not start with these flags."""
    from kvwise.planner.cli import sglang_flags_from_args
    from kvwise.planner.sglang import plan_sglang
    from kvwise.planner.sglang.releases import newest_release, release_for

    model = load_model(model_name)
    gpu = resolve_gpu(args.gpu, args.gpu_memory_gib, None)
    sglang = sglang_flags_from_args(args)
    release = sglang.version or newest_release()
    release_for(release)  # an unknown release: one line, exit 2
    result = plan_sglang(model, gpu, flags, sglang)
    if result.error is not None:
        raise KvwiseError(f"SGLang would not start: {result.error}")
    # vLLM's plan of the same model and card sizes the download, the load and the host memory
    sizing = plan(model, gpu, flags, vllm_version=args.vllm_version)
    return from_sglang_plan(sizing, result, flags, release, options(args))


def build(args: argparse.Namespace, model_name: str, flags: VllmFlags) -> dict[str, Any]:
    if getattr(args, "engine", "vllm") == "sglang":
        return _build_sglang(args, model_name, flags)
    result = planned(args, model_name, flags)
    spec = from_plan(result, flags, options(args))
    rendered = render(spec, args, result)
    paths = write(args.out, rendered.artefacts)
    notes = [*result.warnings, *(f"not modelled: {part}" for part in result.not_modelled)]
    return {
        "target": args.target,
        "files": [str(path) for path in paths],
        "next_steps": list(rendered.next_steps),
        "image": spec.image,
        "vllm_args": [spec.model_id, *spec.engine_args],
        "gpus_per_replica": spec.resources.num_gpus,
        "replicas": spec.options.num_replicas,
        "startup_budget_s": round(spec.startup.total_s),
        "notes": notes,
        "plan": result.to_json(),
    }


def _build_sglang(args: argparse.Namespace, model_name: str, flags: VllmFlags) -> dict[str, Any]:
    from kvwise.deploy.k8s import render_k8s

    spec = sglang_spec(args, model_name, flags)
    rendered = render_k8s(spec, str(args.out))
    paths = write(args.out, rendered.artefacts)
    return {
        "target": args.target,
        "engine": "sglang",
        "files": [str(path) for path in paths],
        "next_steps": list(rendered.next_steps),
        "image": spec.image,
        "sglang_args": spec.container_args,
        "gpus_per_replica": spec.resources.num_gpus,
        "replicas": spec.options.num_replicas,
        "startup_budget_s": round(spec.startup.total_s),
        "notes": [
            "SGLang replicas run on GPUs only; host memory and the startup budget are sized as "
            "for vLLM loading the same checkpoint"
        ],
    }
