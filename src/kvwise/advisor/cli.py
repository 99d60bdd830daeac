"""`kvwise plan MODEL --gpu G --workload KIND ...`: print (or emit as JSON) a recommendation."""

from __future__ import annotations

import argparse
import json

from kvwise.advisor import Objectives, recommend
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.errors import UsageError
from kvwise.sim.workload_flags import spec_from_args


def _objectives(args: argparse.Namespace) -> Objectives:
    for name in ("slo_ttft_ms", "slo_tpot_ms"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {value}")
    return Objectives(ttft_p99_ms=args.slo_ttft_ms, tpot_mean_ms=args.slo_tpot_ms)


def run_recommend(
    args: argparse.Namespace, model: ModelSpec, gpu: GpuSpec, flags: VllmFlags
) -> int:
    if args.num_gpus < 1:
        raise UsageError(f"--num-gpus must be at least 1, got {args.num_gpus}")
    spec = spec_from_args(args)
    result = recommend(
        model,
        gpu,
        flags,
        spec,
        num_gpus=args.num_gpus,
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
