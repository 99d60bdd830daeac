"""`kvwise plan`: the planner's command (`kvwise.planner.cli`) with `--workload KIND ...` on top,
which turns the question around: which flags serve this workload best (print or emit as JSON)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.errors import UsageError
from kvwise.planner import cli as planner_cli
from kvwise.sim.topology_flags import add_topology_flags, topology_from_args
from kvwise.sim.workload_flags import add_trimming_flag, add_workload_flags, spec_from_args

if TYPE_CHECKING:
    from kvwise.advisor import Objectives


def build_parser() -> argparse.ArgumentParser:
    parser = planner_cli.build_parser()
    add_workload_flags(parser, default_kind=None)
    add_trimming_flag(parser)
    goals = parser.add_argument_group("recommendation (with --workload)")
    goals.add_argument("--slo-ttft-ms", type=float, help="objective: p99 time to first token")
    goals.add_argument("--slo-tpot-ms", type=float, help="objective: mean time per output token")
    goals.add_argument(
        "--num-gpus", type=int, help="GPUs on one node to spread replicas / tensor parallelism over"
    )
    add_topology_flags(goals)
    goals.add_argument("--seed", type=int, default=0, help="workload seed")
    return parser


def run(argv: list[str]) -> int:
    args, model_name, flags = planner_cli.parse(argv, build_parser())
    if args.engine == planner_cli.BOTH_ENGINES:
        if not args.kind:
            raise UsageError(
                "--engine vllm,sglang compares the engines on a workload: add --workload KIND "
                "(e.g. --workload agent --sessions 10)"
            )
        from kvwise.core.catalog import load_model

        return run_compare(args, load_model(model_name), planner_cli.gpu_from_args(args), flags)
    if not args.kind or args.engine != "vllm":
        return planner_cli.run_parsed(args, model_name, flags)
    from kvwise.core.catalog import load_model

    return run_recommend(args, load_model(model_name), planner_cli.gpu_from_args(args), flags)


def run_compare(args: argparse.Namespace, model: ModelSpec, gpu: GpuSpec, flags: VllmFlags) -> int:
    """Both engines simulated on the workload; the better one recommended, with reasons."""
    from kvwise.advisor.compare import compare
    from kvwise.advisor.compare_report import render_text, to_json

    result = compare(
        model,
        gpu,
        flags,
        spec_from_args(args),
        sglang=planner_cli.sglang_flags_from_args(args),
        objectives=_objectives(args),
        vllm_version=args.vllm_version,
        seed=args.seed,
        trim_history=args.trim_history,
    )
    print(json.dumps(to_json(result), indent=2) if args.json else render_text(result))
    return 0 if result.best is not None else 1


def _objectives(args: argparse.Namespace) -> Objectives:
    from kvwise.advisor import Objectives  # the simulator loads only for a recommendation

    for name in ("slo_ttft_ms", "slo_tpot_ms"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {value}")
    return Objectives(ttft_p99_ms=args.slo_ttft_ms, tpot_mean_ms=args.slo_tpot_ms)


def run_recommend(
    args: argparse.Namespace, model: ModelSpec, gpu: GpuSpec, flags: VllmFlags
) -> int:
    from kvwise.advisor import recommend

    topology = topology_from_args(args)
    spec = spec_from_args(args)
    result = recommend(
        model,
        gpu,
        flags,
        spec,
        topology=topology,
        objectives=_objectives(args),
        vllm_version=args.vllm_version,
        seed=args.seed,
        trim_history=args.trim_history,
    )
    from kvwise.advisor.report import render, to_json

    if args.json:
        print(json.dumps(to_json(result), indent=2))
    else:
        from rich.console import Console

        render(result, Console())
    return 0 if result.best is not None else 1
