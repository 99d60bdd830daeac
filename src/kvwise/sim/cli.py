"""`kvwise simulate MODEL --gpu G [vLLM flags] --workload KIND [workload flags] [--compare ...]`,
or `--engine sglang [SGLang flags]`: the same workload on SGLang's scheduler (`sglang_flags.py`)."""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
from dataclasses import fields, replace
from typing import Any

from kvwise.core.catalog import load_model
from kvwise.core.command_parser import CommandParser
from kvwise.core.flags import VllmFlags, add_vllm_flags, flags_from_args
from kvwise.core.gpus import GpuSpec, resolve_gpu
from kvwise.core.models import ModelSpec
from kvwise.errors import UsageError
from kvwise.sim.deploy import Deployment, deployment
from kvwise.sim.report import AnyDeployment, Run, print_report, simulation_json
from kvwise.sim.runner import SimResult, simulate
from kvwise.sim.sglang_deploy import sglang_deployment
from kvwise.sim.sglang_flags import (
    SglangSettings,
    add_sglang_simulate_flags,
    check_vllm_args,
    compare_settings,
    settings_from_args,
)
from kvwise.sim.topology_flags import add_topology_flags, replica_topology
from kvwise.sim.workload_flags import add_trimming_flag, add_workload_flags, spec_from_args
from kvwise.sim.workloads import (
    WORKLOAD_KINDS,
    Workload,
    WorkloadSpec,
    build_workload,
    history_budget_tokens,
)

PROGRESS_ABOVE_REQUESTS = 2000  # show a progress bar for runs this long (on a terminal)


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="kvwise simulate",
        description="How a workload behaves on a vLLM (or SGLang) deployment: latency, "
        "throughput, KV use, preemptions (SGLang: retractions).",
        epilog='Compare configurations: --compare "--max-num-seqs 32" "--kv-cache-dtype fp8" '
        '(SGLang: --engine sglang --compare "--mem-fraction-static 0.8")',
    )
    parser.add_argument("model", help="HF id, catalog name, local dir or config.json")
    parser.add_argument(
        "--engine",
        type=_engine,
        default="vllm",
        metavar="{vllm,sglang}",
        help="vllm (default) or sglang: whose scheduler and KV pool to simulate",
    )
    parser.add_argument("--gpu", help="catalog name (rtx4090, h100, a100-80gb...)")
    parser.add_argument("--gpu-memory-gib", type=float, help="any other card: its total memory")
    parser.add_argument("--vllm-version", help="vLLM release to model (default: latest known)")
    parser.add_argument(
        "--vllm-use-v1",
        type=int,
        choices=(0, 1),
        help="the VLLM_USE_V1 environment variable vLLM 0.8.0-0.10.1 runs with (0: the V0 engine)",
    )
    add_vllm_flags(parser)
    add_sglang_simulate_flags(parser)
    add_workload_flags(parser, default_kind=None)
    add_trimming_flag(parser)
    add_topology_flags(parser.add_argument_group("nodes and links (tensor / pipeline parallel)"))
    parser.add_argument(
        "--seed", type=int, default=0, help="workload seed (same seed, same result)"
    )
    parser.add_argument(
        "--warm-cache",
        action="store_true",
        help="start with the workload's prompts in the prefix cache, as a server that already "
        "served them (an earlier point of a benchmark sweep, not restarted) has them",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--plot", metavar="FILE", help="charts: FILE.html (self-contained inline SVG)"
    )
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="FLAGS",
        help='other flag sets to run side by side, e.g. "--max-num-seqs 32"',
    )
    return parser


def _engine(value: str) -> str:
    if value in ("vllm", "sglang"):
        return value
    if {part.strip() for part in value.split(",")} == {"vllm", "sglang"}:
        raise argparse.ArgumentTypeError(
            f"{value!r}: simulate runs one engine; to compare the two on a workload: kvwise plan "
            "MODEL --gpu G --workload KIND --engine vllm,sglang"
        )
    raise argparse.ArgumentTypeError(f"{value!r}: give vllm or sglang")


def workload_spec(args: argparse.Namespace) -> WorkloadSpec:
    if not args.kind:
        raise UsageError(f"--workload is required: one of {', '.join(WORKLOAD_KINDS)}")
    return spec_from_args(args)


def _gpu(args: argparse.Namespace) -> GpuSpec:
    # a simulation is of a named card: no NVML detection
    return resolve_gpu(args.gpu, args.gpu_memory_gib, detect=False)


def _compare_flags(base: VllmFlags, text: str) -> VllmFlags:
    parser = CommandParser(prog="--compare", add_help=False)
    add_vllm_flags(parser)
    try:
        args = parser.parse_args(shlex.split(text))
    except UsageError as exc:
        raise UsageError(f"--compare {text!r}: {exc}") from exc
    override = flags_from_args(args)
    changes = {
        f.name: getattr(override, f.name)
        for f in fields(override)
        if getattr(override, f.name) is not None
    }
    return replace(base, **changes).validate()


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    spec = workload_spec(args)
    model, gpu = load_model(args.model), _gpu(args)
    workload = build_workload(spec, random.Random(args.seed))
    deployments: list[tuple[str, AnyDeployment]]
    if args.engine == "sglang":
        settings = settings_from_args(args)
        setting_sets = [("base", settings)] + [
            (text, compare_settings(settings, text)) for text in args.compare or []
        ]
        deployments = [
            (label, _sglang_deployed(model, gpu, s, args, workload)) for label, s in setting_sets
        ]
    else:
        check_vllm_args(args)
        base = flags_from_args(args)
        flag_sets = [("base", base)] + [
            (text, _compare_flags(base, text)) for text in args.compare or []
        ]
        deployments = [
            (label, _deployed(model, gpu, flags, args, label, workload))
            for label, flags in flag_sets
        ]
    show_progress = (
        not args.json and sys.stderr.isatty() and workload.num_requests >= PROGRESS_ABOVE_REQUESTS
    )
    runs = [
        Run(label, dep, _simulate(dep, workload, label, show_progress, args.warm_cache))
        for label, dep in deployments
    ]
    _check_not_all_rejected([r.result for r in runs])
    if args.plot:
        from kvwise.sim.plot import write_plot

        write_plot(args.plot, [(r.label, r.result) for r in runs])
    if args.json:
        payload: dict[str, Any] = simulation_json(model.model_id, gpu, spec, args.seed, runs)
        print(json.dumps(payload, indent=2))
    else:
        print_report(model.model_id, gpu, spec, args.seed, runs, plot_path=args.plot)
    return 0


def _deployed(
    model: ModelSpec,
    gpu: GpuSpec,
    flags: VllmFlags,
    args: argparse.Namespace,
    label: str,
    workload: Workload,
) -> Deployment:
    """The deployment with the history trimming of kvwise's gateway, as `plan --workload` has."""
    topology = replica_topology(args, flags)
    dep = deployment(
        model,
        gpu,
        flags,
        vllm_version=args.vllm_version,
        vllm_use_v1=None if args.vllm_use_v1 is None else bool(args.vllm_use_v1),
        label=label,
        topology=topology,
    )
    budget = history_budget_tokens(
        workload, dep.plan.flags.max_model_len, trim_history=args.trim_history
    )
    return replace(dep, config=replace(dep.config, history_budget_tokens=budget))


def _sglang_deployed(
    model: ModelSpec,
    gpu: GpuSpec,
    settings: SglangSettings,
    args: argparse.Namespace,
    workload: Workload,
) -> AnyDeployment:
    """SGLang's replica (its planner's pool), with the gateway's history trimming as for vLLM."""
    dep = sglang_deployment(
        model,
        gpu,
        settings.flags,
        settings.sglang,
        schedule_policy=settings.schedule_policy,
        disable_radix_cache=settings.disable_radix_cache,
    )
    budget = history_budget_tokens(
        workload, dep.config.engine.max_model_len, trim_history=args.trim_history
    )
    return replace(dep, config=replace(dep.config, history_budget_tokens=budget))


def _simulate(
    dep: AnyDeployment, workload: Workload, label: str, show_progress: bool, warm_cache: bool
) -> SimResult:
    if not show_progress:
        return simulate(dep.config, workload, warm_cache=warm_cache)
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        task = progress.add_task(f"simulating {label}", total=workload.num_requests)
        return simulate(
            dep.config,
            workload,
            on_progress=lambda done: progress.update(task, completed=done),
            warm_cache=warm_cache,
        )


def _check_not_all_rejected(results: list[SimResult]) -> None:
    for result in results:
        metrics = result.metrics
        if metrics["completed"] == 0 and metrics["rejected"]:
            max_len = result.config.engine.max_model_len
            if result.config.engine.scheduler == "sglang":
                raise UsageError(
                    f"every request exceeds SGLang's limit ({max_len} tokens: the smaller of "
                    "--context-length and the KV pool); shorten the workload or raise "
                    "--context-length or --mem-fraction-static"
                )
            raise UsageError(
                f"every request exceeds max_model_len ({max_len}): prompt + max_tokens must fit; "
                "shorten the workload or raise --max-model-len"
            )
