"""`kvwise doctor [FILE|-] [--nvidia-smi FILE] [--json]`: explain a vLLM log or traceback."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from kvwise.core.command_parser import CommandParser
from kvwise.doctor.diagnose import diagnose
from kvwise.doctor.render import render
from kvwise.errors import UsageError


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="kvwise doctor",
        description=(
            "Read a vLLM log or traceback (V0 0.4 to V1 0.33), name the root cause with the "
            "lines that show it (the start-up stage of an out-of-memory error; over-long "
            "requests, preemption, a dead engine while serving), and prescribe the smallest "
            "change that the planner says starts, with its numbers before and after."
        ),
        epilog="Example: kvwise doctor vllm.log --nvidia-smi smi.txt   |   docker logs vllm 2>&1 | kvwise doctor -",
    )
    parser.add_argument("log", nargs="?", default="-", help="log file, or - for stdin (default)")
    parser.add_argument(
        "--nvidia-smi", metavar="FILE", help="nvidia-smi output taken after the failure"
    )
    parser.add_argument("--model", help="the model, when the log does not name it (HF id or path)")
    parser.add_argument("--gpu", help="the GPU, when the log does not name it (rtx4090, a100...)")
    parser.add_argument(
        "--vllm-version", help="the vLLM release, when the log does not print it (e.g. 0.8.1)"
    )
    parser.add_argument(
        "--sglang-version", help="the SGLang release, for an SGLang log that does not print it"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def _read(path: str, what: str) -> bytes:
    if path == "-":
        if sys.stdin.isatty():
            raise UsageError("no log given: pass a file, or pipe a log into `kvwise doctor -`")
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{what} {path!r}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{what} {path!r} is a directory, not a file") from None
    except OSError as exc:
        raise UsageError(f"{what} {path!r}: {exc.strerror or exc}") from None


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    data = _read(args.log, "log")
    smi = None
    if args.nvidia_smi:
        smi = _read(args.nvidia_smi, "nvidia-smi file").decode("utf-8", errors="replace")
    if _run_sglang(data, args):
        return 0
    report = diagnose(
        data,
        nvidia_smi=smi,
        model_hint=args.model,
        gpu_hint=args.gpu,
        version_hint=args.vllm_version,
    )
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        render(report, Console())
    return 0


def _run_sglang(data: bytes, args: argparse.Namespace) -> bool:
    """An SGLang log goes to SGLang's doctor (sglang_report.py); False for any other log."""
    from kvwise.doctor.sglang_log import is_sglang_log
    from kvwise.doctor.text import read_log

    text = read_log(data)
    if not is_sglang_log(text):
        return False
    from kvwise.doctor.sglang_report import diagnose_sglang, render_sglang

    report = diagnose_sglang(
        text, model_hint=args.model, gpu_hint=args.gpu, version_hint=args.sglang_version
    )
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        render_sglang(report, Console())
    return True
