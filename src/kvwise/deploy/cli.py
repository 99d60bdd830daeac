"""`kvwise deploy MODEL --gpu G [vLLM flags] --target k8s|helm|ray --out DIR`.

Writes the artefacts for a cluster with the flags `kvwise plan` resolves, prints what to run
next, and changes nothing on any cluster. A pasted command works as in `kvwise plan`:
`kvwise deploy --gpu rtx4090 --target k8s --out DIR -- vllm serve MODEL --max-model-len 8192`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kvwise.core.command_parser import CommandParser
from kvwise.core.flags import VllmFlags, add_vllm_flags, flags_from_args, parse_vllm_command
from kvwise.errors import UsageError
from kvwise.planner.cli import add_sglang_flags

TARGETS = ("k8s", "helm", "ray")


def build_parser() -> argparse.ArgumentParser:
    from kvwise.deploy.startup import ENGINE_INIT_S, LOAD_RATE_MB_S
    from kvwise.deploy.workload import add_workload_options

    parser = CommandParser(prog="kvwise deploy", description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", help="HF id, catalog name, local dir or config.json")
    parser.add_argument("--gpu", help="GPU catalog name (rtx4090, a100-80gb, h100...)")
    parser.add_argument("--gpu-memory-gib", type=float, help="any other card: its memory in GiB")
    parser.add_argument("--vllm-version", help="vLLM release to plan for and pin the image to")
    parser.add_argument("--target", choices=TARGETS, required=True)
    parser.add_argument(
        "--engine", choices=("vllm", "sglang"), default="vllm",
        help="the replicas' engine (sglang: --target k8s only)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="folder to write the files into")
    parser.add_argument(
        "--replicas", type=int, help="vLLM replicas (k8s, helm; default 1, or as --workload picks)"
    )
    parser.add_argument(
        "--name", help="name of the replicas (and Helm release; default: the engine's name)"
    )
    parser.add_argument("--gateways", type=int, default=2, help="kvwise gateway pods (>= 2)")
    parser.add_argument("--gateway-image", help="image with kvwise[serve] (default kvwise:VERSION)")
    parser.add_argument("--nodes", type=int, help="ray: nodes (pipeline parallel across them)")
    parser.add_argument("--gpus-per-node", type=int, help="ray: GPUs per node (tensor parallel)")
    parser.add_argument(
        "--load-rate-mb-s",
        type=float,
        default=LOAD_RATE_MB_S,
        help=f"rate the checkpoint downloads at, for the startup probe (default {LOAD_RATE_MB_S:g})",
    )
    parser.add_argument(
        "--engine-init-s",
        type=float,
        default=ENGINE_INIT_S,
        help=f"allowance for compile and CUDA graphs after loading (default {ENGINE_INIT_S:g})",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable summary")
    add_vllm_flags(parser)
    add_sglang_flags(parser)
    add_workload_options(parser)
    return parser


def parse(argv: list[str]) -> tuple[argparse.Namespace, str, VllmFlags]:
    """The deploy options, the model and the vLLM flags (typed, or pasted after `--`)."""
    own, pasted = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, None)
    )
    args = build_parser().parse_args(own)
    if pasted is not None:
        command = parse_vllm_command(pasted)
        if args.model and args.model != command.model:
            raise UsageError(f"two models: {args.model} and the pasted {command.model}; give one")
        return args, command.model, flags_from_args(args).merged(**command.flags.set_values())
    if not args.model:
        raise UsageError(
            "give a MODEL, or paste a command after --: kvwise deploy ... -- vllm serve MODEL"
        )
    return args, args.model, flags_from_args(args)


def _check_counts(args: argparse.Namespace) -> None:
    for name in ("replicas", "gateways", "nodes", "gpus_per_node", "load_rate_mb_s"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {value}")
    if args.engine_init_s < 0:
        raise UsageError(f"--engine-init-s must not be negative, got {args.engine_init_s}")
    if args.gateways < 2:
        raise UsageError(
            "--gateways must be at least 2: one gateway pod is a single point of failure"
        )
    if args.target != "ray" and (args.nodes or args.gpus_per_node):
        raise UsageError("--nodes and --gpus-per-node are for --target ray")
    if args.target == "ray" and (args.replicas or args.kind):
        raise UsageError(
            "--target ray runs one vLLM instance per Ray cluster; "
            "--replicas and --workload are for k8s/helm"
        )
    if args.engine == "sglang" and args.target != "k8s":
        raise UsageError(
            f"--engine sglang: --target {args.target} cannot run SGLang (the production-stack "
            "chart's container always runs `vllm serve`; Ray targets vLLM's executor); use "
            "--target k8s"
        )
    if args.engine == "sglang" and args.kind:
        raise UsageError("--engine sglang takes --replicas; --workload picks vLLM flags")
    if args.replicas and args.kind:
        raise UsageError("give --replicas or --workload (which picks the replicas), not both")


def ray_layout(args: argparse.Namespace, flags: VllmFlags) -> VllmFlags:
    """TP = GPUs per node and PP = nodes, unless the flags set them."""
    nodes = args.nodes or 1
    per_node = args.gpus_per_node or (flags.tensor_parallel_size or 1)
    tp = flags.tensor_parallel_size or per_node
    pp = flags.pipeline_parallel_size or nodes
    if tp * pp > nodes * per_node:
        raise UsageError(
            f"TP {tp} x PP {pp} = {tp * pp} GPUs, but {nodes} node(s) x {per_node} GPU(s) "
            f"= {nodes * per_node}: vLLM's Ray placement group would never be scheduled"
        )
    args.nodes, args.gpus_per_node = nodes, per_node
    return flags.merged(tensor_parallel_size=tp, pipeline_parallel_size=pp)


def run(argv: list[str]) -> int:
    from kvwise.deploy.build import build

    args, model_name, flags = parse(argv)
    args.name = args.name or args.engine
    _check_counts(args)
    if args.target == "ray":
        flags = ray_layout(args, flags)
    if args.kind:
        from kvwise.deploy.workload import recommended

        choice = recommended(args, model_name, flags)
        model_name, flags, args.replicas = choice.model_name, choice.flags, choice.num_replicas
        print(
            f"kvwise deploy: the advisor picked {choice.label} for this workload", file=sys.stderr
        )
    args.replicas = args.replicas or 1
    result = build(args, model_name, flags)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"wrote {len(result['files'])} file(s) for {args.target} in {args.out}:")
    for path in result["files"]:
        print(f"  {path}")
    for note in result["notes"]:
        print(f"note: {note}", file=sys.stderr)
    print("next:")
    for step in result["next_steps"]:
        print(f"  {step}")
    return 0
