"""`kvwise bench URL`: drive an OpenAI-compatible server with a simulator workload, measure it.

    kvwise bench http://127.0.0.1:8000 --workload agent --sessions 10 --turns 30 \\
        --max-concurrency 1,2,4,8 --out results.json --html report.html \\
        --predict --gpu rtx4090 --max-model-len 16384
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import secrets
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from kvwise import __version__
from kvwise.bench.driver import Target
from kvwise.bench.levels import discover, level_workload, run_level
from kvwise.bench.prompts import (
    LocalTokenizer,
    SegmentTexts,
    ServerTokenizer,
    TokenCounter,
    WordEstimate,
    find_local_tokenizer,
)
from kvwise.bench.results import BenchResults, RunResult, ServerInfo, write_results
from kvwise.bench.sizing import SIZE_FLAGS, fit_to_context
from kvwise.core.command_parser import CommandParser
from kvwise.core.flags import add_vllm_flags, flags_from_args
from kvwise.errors import UsageError
from kvwise.sim.workload_flags import add_workload_flags, spec_from_args
from kvwise.sim.workloads import WorkloadSpec


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="kvwise bench", description=__doc__.splitlines()[0])
    parser.add_argument("url", help="server base URL (http://host:port, with or without /v1)")
    parser.add_argument("--model", help="served model name (default: the server's first)")
    parser.add_argument(
        "--max-concurrency",
        type=_levels,
        default=None,
        help="sessions in flight at most; a list (1,2,4,8) runs one level after another",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    parser.add_argument("--tokenizer", help="tokenizer.json or a model dir (default: the server's)")
    parser.add_argument(
        "--no-ignore-eos",
        dest="ignore_eos",
        action="store_false",
        help="let the model stop early (default: exactly the workload's output lengths)",
    )
    parser.add_argument("--timeout-s", type=float, default=600.0, help="per request")
    parser.add_argument("--out", type=Path, help="results JSON (input of kvwise calibrate)")
    parser.add_argument("--html", type=Path, help="HTML report with charts")
    parser.add_argument("--json", action="store_true", help="summary as JSON on stdout")
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    add_workload_flags(parser, skip=("max_concurrency",))
    predict = parser.add_argument_group("prediction (kvwise simulate for the same config)")
    predict.add_argument("--predict", action="store_true", help="simulate each run as well")
    predict.add_argument("--gpu", help="the server's GPU (catalog name)")
    predict.add_argument("--sim-model", help="model as kvwise loads it (default: the server's)")
    predict.add_argument("--vllm-version", help="the server's vLLM release")
    add_vllm_flags(parser)
    return parser


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from exc
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError("concurrency levels must be at least 1")
    return levels


def base_url(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def choose_counter(
    args: argparse.Namespace, server: ServerInfo, client: httpx.Client
) -> TokenCounter:
    """The model's tokenizer.json when one is at hand, else the server's /tokenize, else an
    estimate (the server's usage fields still give the real counts)."""
    path = find_local_tokenizer(args.tokenizer, server.model_root, args.sim_model)
    if args.tokenizer and path is None:
        raise UsageError(f"--tokenizer {args.tokenizer}: no tokenizer.json there")
    if path is not None:
        try:
            return LocalTokenizer(path)
        except UsageError as exc:
            print(f"kvwise bench: note: {exc}; asking the server instead", file=sys.stderr)
    counter = ServerTokenizer(client, server.url, server.model)
    try:
        counter.encode(" hello")
    except Exception:  # any failure: the server has no usable /tokenize
        return WordEstimate()
    return counter


def _sim_model(args: argparse.Namespace, server: ServerInfo) -> str:
    return args.sim_model or server.model_root or server.model


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    spec = spec_from_args(args, skip=("max_concurrency",))
    flags = flags_from_args(args)
    if args.predict and not args.gpu:
        raise UsageError("--predict needs --gpu (the GPU the server runs on)")
    server = asyncio.run(discover(base_url(args.url), args.model, args.api_key))
    server = server.model_copy(update={"flags": flags.set_values()})
    stated = {name for name in SIZE_FLAGS if getattr(args, name, None) is not None}
    spec, note = fit_to_context(spec, server.max_model_len, stated)
    if note:
        print(f"kvwise bench: {note}", file=sys.stderr)
    target = Target(server.url, server.model, args.api_key, args.ignore_eos, args.timeout_s)
    levels: list[int | None] = list(args.max_concurrency or [spec.max_concurrency])
    with httpx.Client(timeout=30.0, headers=target.headers()) as client:  # for /tokenize
        counter = choose_counter(args, server, client)
        runs = asyncio.run(_run_levels(target, spec, levels, args.seed, counter, args.progress))
    results = BenchResults(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        kvwise_version=__version__,
        server=server,
        workload=asdict(spec),
        seed=args.seed,
        tokenizer=counter.source,
        gpu=args.gpu,
        sim_model=_sim_model(args, server),
        vllm_version=args.vllm_version,
        runs=runs,
    )
    if args.predict:
        results = _with_predictions(results, args, spec)
    _write_outputs(results, args)
    return 0 if all(run.metrics["completed"] for run in results.runs) else 1


async def _run_levels(
    target: Target,
    spec: WorkloadSpec,
    levels: list[int | None],
    seed: int,
    counter: TokenCounter,
    show_progress: bool,
) -> list[RunResult]:
    from rich.console import Console
    from rich.progress import Progress

    workloads = [level_workload(spec, level, seed) for level in levels]
    total = sum(w.num_requests for w in workloads)
    results = []
    console = Console(stderr=True)
    # two refreshes a second: the client shares the CPU with the server on small machines
    with Progress(
        console=console, disable=not show_progress, transient=True, refresh_per_second=2
    ) as progress:
        task = progress.add_task("bench", total=total)
        for level, workload in zip(levels, workloads, strict=True):
            failed = 0

            def on_record(record: Any, level: int | None = level) -> None:
                nonlocal failed
                failed += 0 if record.is_ok else 1
                note = f", {failed} failed" if failed else ""
                progress.update(task, advance=1, description=f"concurrency {level}{note}")

            # fresh text for every run: the server's prefix cache starts as cold as the
            # simulator's, whatever ran before (the workload's shape is still the seed's)
            texts = SegmentTexts(counter, salt=secrets.randbits(32))
            run_result = await run_level(target, workload, texts, on_record, spec.request_rate)
            results.append(run_result)
    return results


def _with_predictions(
    results: BenchResults, args: argparse.Namespace, spec: WorkloadSpec
) -> BenchResults:
    from kvwise.bench.predict import deployed, judge_bands, predict
    from kvwise.core.catalog import load_model
    from kvwise.core.gpus import find_gpu

    model = load_model(_sim_model(args, results.server))
    replica = deployed(
        model,
        find_gpu(args.gpu),
        flags_from_args(args),
        results.server,
        vllm_version=args.vllm_version,
    )
    runs = [
        run.model_copy(
            update={
                "prediction": judge_bands(
                    run.metrics, predict(replica, spec, run.max_concurrency, args.seed)
                )
            }
        )
        for run in results.runs
    ]
    return results.model_copy(update={"runs": runs})


def _write_outputs(results: BenchResults, args: argparse.Namespace) -> None:
    from kvwise.bench.report import html_report, terminal_report

    if args.out:
        write_results(results, args.out)
    if args.html:
        args.html.parent.mkdir(parents=True, exist_ok=True)
        args.html.write_text(html_report(results))
    if args.json:
        summary = results.model_dump(exclude={"runs": {"__all__": {"requests"}}})
        print(json.dumps(summary, indent=2))
        return
    from rich.console import Console

    terminal_report(results, Console())
