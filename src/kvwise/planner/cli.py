"""`kvwise plan MODEL --gpu G [vLLM flags]` and `kvwise plan -- vllm serve MODEL --flags...`.

The planner's part of the `plan` command: its options, the pasted command, the plan and its
views. `--workload` (a recommendation: planner plus simulator) is added on top by
`kvwise.advisor.cli`, the module the dispatcher runs for `kvwise plan`, so the planner never
imports the layers above it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from kvwise.core.catalog import load_model
from kvwise.core.command_parser import CommandParser
from kvwise.core.flags import VllmFlags, add_vllm_flags, flags_from_args, parse_vllm_command
from kvwise.core.gpus import GIB, GpuSpec, resolve_gpu
from kvwise.errors import UsageError
from kvwise.planner.plan import plan

if TYPE_CHECKING:
    from kvwise.planner.sglang import SglangFlags


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="kvwise plan",
        description="Will vLLM start, how much KV cache does it get, and what does each knob change.",
        epilog="A pasted command works too: kvwise plan --gpu rtx4090 -- vllm serve MODEL --max-model-len 8192",
    )
    parser.add_argument("model", nargs="?", help="HF id, catalog name, local dir or config.json")
    gpu = parser.add_argument_group("hardware")
    gpu.add_argument(
        "--gpu", help="catalog name (rtx4090, a100-80gb, h100...); detected via NVML if omitted"
    )
    gpu.add_argument("--gpu-memory-gib", type=float, help="any other card: its total memory in GiB")
    gpu.add_argument(
        "--gpu-free-gib",
        type=float,
        help="free memory when vLLM starts (other processes on the card)",
    )
    gpu.add_argument(
        "--host-ram-gib", type=float, help="host RAM of the machine, to check for 'Killed'"
    )
    parser.add_argument(
        "--vllm-version", help="vLLM release whose accounting to use (default: latest known)"
    )
    parser.add_argument(
        "--vllm-use-v1",
        type=int,
        choices=(0, 1),
        help="the VLLM_USE_V1 environment variable vLLM 0.8.0-0.10.1 runs with (0: the V0 engine)",
    )
    parser.add_argument(
        "--flashinfer-sampler",
        type=int,
        choices=(0, 1),
        help="whether vLLM's V1 sampler uses FlashInfer: 1 with VLLM_USE_FLASHINFER_SAMPLER=1 "
        "(0.11.1+, where it is opt-in), 0 for a pip install without the [flashinfer] extra "
        "(0.8.0-0.11.0); default: the release's own default (docs/vllm_rules.md)",
    )
    parser.add_argument(
        "--engine",
        type=_engine,
        default="vllm",
        help="vllm, sglang, or vllm,sglang (with --workload: compare the two and recommend one)",
    )
    add_sglang_flags(parser)
    parser.add_argument(
        "--explain", action="store_true", help="what each common knob changes, in numbers"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_vllm_flags(parser)
    return parser


BOTH_ENGINES = "vllm,sglang"


def _engine(value: str) -> str:
    names = sorted({part.strip() for part in value.split(",") if part.strip()})
    if not names or any(name not in ("vllm", "sglang") for name in names):
        raise argparse.ArgumentTypeError(f"{value!r}: give vllm, sglang or vllm,sglang")
    return names[0] if len(names) == 1 else BOTH_ENGINES


def add_sglang_flags(parser: argparse.ArgumentParser) -> None:
    """SGLang's own flags, under SGLang's names (with --engine sglang)."""
    group = parser.add_argument_group("SGLang (with --engine sglang)")
    group.add_argument(
        "--sglang-version", help="SGLang release whose rules to use (default: newest known)"
    )
    group.add_argument(
        "--mem-fraction-static", type=float, help="weights + KV fraction of free memory"
    )
    group.add_argument("--chunked-prefill-size", type=int, help="prefill chunk in tokens")
    group.add_argument("--cuda-graph-max-bs", type=int, help="largest decode batch captured")
    group.add_argument("--max-running-requests", type=int, help="requests running at once")


def sglang_flags_from_args(args: argparse.Namespace) -> SglangFlags:
    from kvwise.planner.sglang import SglangFlags

    if args.mem_fraction_static is not None and not 0 < args.mem_fraction_static < 1:
        raise UsageError("--mem-fraction-static must be in (0, 1)")
    return SglangFlags(
        version=args.sglang_version,
        mem_fraction_static=args.mem_fraction_static,
        chunked_prefill_size=args.chunked_prefill_size,
        cuda_graph_max_bs=args.cuda_graph_max_bs,
        max_running_requests=args.max_running_requests,
    )


def gpu_from_args(args: argparse.Namespace) -> GpuSpec:
    return resolve_gpu(args.gpu, args.gpu_memory_gib, args.gpu_free_gib)


def _split_pasted(argv: list[str]) -> tuple[list[str], list[str] | None]:
    if "--" in argv:
        index = argv.index("--")
        return argv[:index], argv[index + 1 :]
    return argv, None


def parse(
    argv: list[str], parser: argparse.ArgumentParser | None = None
) -> tuple[argparse.Namespace, str, VllmFlags]:
    """The options (by `parser`, default the planner's own), the model and its vLLM flags."""
    own, pasted = _split_pasted(argv)
    args = (parser or build_parser()).parse_args(own)
    if pasted is not None and _is_sglang(pasted):
        return _parse_sglang_paste(args, pasted)
    if pasted is not None:
        command = parse_vllm_command(pasted)
        flags = flags_from_args(args).merged(**command.flags.set_values())
        for ignored in command.ignored:
            print(
                f"kvwise plan: note: {ignored} changes no memory figure kvwise models; "
                "kept as pasted in the commands it prints",
                file=sys.stderr,
            )
        return args, command.model, flags
    if not args.model:
        raise UsageError(
            "give a MODEL, or paste a command after --: kvwise plan --gpu G -- vllm serve MODEL ..."
        )
    return args, args.model, flags_from_args(args)


def _is_sglang(pasted: list[str]) -> bool:
    from kvwise.planner.sglang.command import is_sglang_command

    return is_sglang_command(pasted)


def _parse_sglang_paste(
    args: argparse.Namespace, pasted: list[str]
) -> tuple[argparse.Namespace, str, VllmFlags]:
    """A pasted SGLang command plans SGLang; its flags fill what the options left unset."""
    from kvwise.planner.sglang.command import parse_sglang_command

    command = parse_sglang_command(pasted)
    args.engine = "sglang"
    for field, value in vars(command.sglang).items():
        if field != "version" and getattr(args, field, None) is None:
            setattr(args, field, value)
    for ignored in command.ignored:
        print(
            f"kvwise plan: note: {ignored} changes no memory figure kvwise models", file=sys.stderr
        )
    return args, command.model, flags_from_args(args).merged(**command.flags.set_values())


def run(argv: list[str]) -> int:
    return run_parsed(*parse(argv))


def run_parsed(args: argparse.Namespace, model_name: str, flags: VllmFlags) -> int:
    model = load_model(model_name)
    gpu = gpu_from_args(args)
    host = int(args.host_ram_gib * GIB) if args.host_ram_gib else None
    if args.engine == BOTH_ENGINES:
        raise UsageError("--engine vllm,sglang compares the engines on a workload: add --workload")
    if args.engine == "sglang":
        from kvwise.planner.sglang import run_sglang

        return run_sglang(model, gpu, flags, as_json=args.json, sglang=sglang_flags_from_args(args))
    use_v1 = None if args.vllm_use_v1 is None else bool(args.vllm_use_v1)
    sampler = None if args.flashinfer_sampler is None else bool(args.flashinfer_sampler)
    result = plan(
        model,
        gpu,
        flags,
        vllm_version=args.vllm_version,
        host_ram_available_bytes=host,
        vllm_use_v1=use_v1,
        flashinfer_sampler=sampler,
    )
    if args.explain:
        from kvwise.planner.explain import run_explain

        return run_explain(result, flags, as_json=args.json)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        from rich.console import Console

        from kvwise.planner.report import render

        render(result, Console())
    return 0 if result.starts else 1
