"""`kvwise deploy ... --workload KIND --num-gpus N`: let the advisor choose, then deploy its pick.

The advisor (`kvwise plan --workload`) plans and simulates each candidate (checkpoint variant,
KV dtype, max_num_seqs, tensor parallel vs replicas) on the GPUs given; its best one becomes the
deployment: that checkpoint, those flags, that many replicas.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from kvwise.core.flags import VllmFlags
from kvwise.errors import KvwiseError, UsageError


@dataclass(frozen=True)
class Choice:
    model_name: str
    flags: VllmFlags
    num_replicas: int
    label: str  # the advisor's short description, printed to say what was chosen


def add_workload_options(parser: argparse.ArgumentParser) -> None:
    from kvwise.sim.workload_flags import add_trimming_flag, add_workload_flags

    add_workload_flags(parser, default_kind=None)
    add_trimming_flag(parser)
    goals = parser.add_argument_group("choosing the layout (with --workload)")
    goals.add_argument("--num-gpus", type=int, help="GPUs to spread replicas / TP over")
    goals.add_argument("--slo-ttft-ms", type=float, help="objective: p99 time to first token")
    goals.add_argument("--slo-tpot-ms", type=float, help="objective: mean time per output token")
    goals.add_argument("--seed", type=int, default=0, help="workload seed")


def recommended(args: argparse.Namespace, model_name: str, flags: VllmFlags) -> Choice:
    from kvwise.advisor import Objectives, recommend
    from kvwise.core.catalog import load_model
    from kvwise.core.gpus import resolve_gpu
    from kvwise.sim.workload_flags import spec_from_args

    if args.num_gpus is None or args.num_gpus < 1:
        raise UsageError("--workload needs --num-gpus N (the GPUs to deploy on)")
    result = recommend(
        load_model(model_name),
        resolve_gpu(args.gpu, args.gpu_memory_gib, None),
        flags,
        spec_from_args(args),
        num_gpus=args.num_gpus,
        objectives=Objectives(ttft_p99_ms=args.slo_ttft_ms, tpot_mean_ms=args.slo_tpot_ms),
        vllm_version=args.vllm_version,
        seed=args.seed,
        trim_history=args.trim_history,
    )
    if result.best is None:
        raise KvwiseError(f"no layout kvwise tried starts on {args.num_gpus} GPU(s)")
    best = result.best.candidate
    return Choice(best.model.model_id, best.flags, best.replicas, best.label())
