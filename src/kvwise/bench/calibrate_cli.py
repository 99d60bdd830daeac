"""`kvwise calibrate RESULTS... --gpu G --model M`: fit the step-time model to bench results.

Reads `kvwise bench --out` files, fits the simulator's step-time coefficients for the GPU and
model (`calibrate.py` explains the estimator), reports how far the simulator was from the
measurements before and after, and stores the coefficients in the user's calibration file
(`kvwise.core.calibration`), where `simulate`, `plan --workload` and `bench --predict` find them.
"""

from __future__ import annotations

import argparse
import datetime
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvwise.bench.calibrate import CalibrationRun, FitResult, fit
from kvwise.bench.measured import measured_run
from kvwise.bench.results import BenchResults, read_results
from kvwise.core.calibration import Calibration, calibration_path, save_calibration
from kvwise.core.command_parser import CommandParser
from kvwise.core.flags import VllmFlags, add_vllm_flags, flags_from_args
from kvwise.errors import DataError, UsageError
from kvwise.sim.steptime import StepTimeCoefficients


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="kvwise calibrate", description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="kvwise bench --out files")
    parser.add_argument("--gpu", help="the GPU the server ran on (default: as the results say)")
    parser.add_argument(
        "--model", help="the model as kvwise loads it (default: as the results say)"
    )
    parser.add_argument("--vllm-version", help="the server's vLLM release")
    parser.add_argument(
        "--out", type=Path, help=f"calibration file (default: {calibration_path()})"
    )
    parser.add_argument("--dry-run", action="store_true", help="fit and report, store nothing")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_vllm_flags(parser)
    return parser


@dataclass(frozen=True)
class _Target:
    gpu_name: str
    model_name: str


def _one(values: set[str | None], flag: str, given: str | None) -> str:
    if given:
        return given
    found = {v for v in values if v}
    if len(found) != 1:
        detail = f"the results name {sorted(found)}" if found else "the results do not say"
        raise UsageError(f"pass {flag}: {detail}")
    return found.pop()


def _target(results: list[BenchResults], args: argparse.Namespace) -> _Target:
    return _Target(
        gpu_name=_one({r.gpu for r in results}, "--gpu", args.gpu),
        model_name=_one({r.sim_model for r in results}, "--model", args.model),
    )


def _runs(
    results: list[BenchResults], args: argparse.Namespace, target: _Target
) -> tuple[list[CalibrationRun], StepTimeCoefficients, str, str]:
    """Every measured run on its simulated replica, with the shipped coefficients as prior."""
    from kvwise.bench.predict import deployed
    from kvwise.core.catalog import load_model
    from kvwise.core.gpus import find_gpu
    from kvwise.sim.coefficients import coefficients_for

    model, gpu = load_model(target.model_name), find_gpu(target.gpu_name)
    prior = coefficients_for(gpu)
    runs = []
    for result in results:
        flags = VllmFlags(**result.server.flags).merged(**flags_from_args(args).set_values())
        version = args.vllm_version or result.vllm_version
        replica = deployed(
            model, gpu, flags, result.server, vllm_version=version, coefficients=prior
        )
        for run in result.runs:
            measured = measured_run(run.requests)
            if measured.records:
                runs.append(CalibrationRun(measured, replica.config))
    if not runs:
        raise DataError("no successful request in the results: nothing to fit")
    return runs, prior, gpu.name, model.model_id


def streamed_token_s(results: list[BenchResults]) -> float | None:
    """The API server's CPU seconds per streamed output token, from the runs that read it on
    /metrics (`api_server_cpu_s`), or None. Per run: the CPU the server spent over the tokens it
    generated, which also carries the run's share of per-request work and /metrics scrapes. The
    least of the runs: the API server merges a lagging stream's tokens into fewer chunks, so
    the busiest run is the one nearest the cost at saturation, where it caps tokens/s
    (kvwise.sim.frontend)."""
    per_token = []
    for result in results:
        for run in result.runs:
            server = run.server_metrics or {}
            cpu_s, tokens = server.get("api_server_cpu_s"), server.get("generation_tokens")
            if cpu_s is not None and cpu_s > 0 and tokens:
                per_token.append(cpu_s / tokens)
    return min(per_token) if per_token else None


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    results = [read_results(path) for path in args.results]
    runs, prior, gpu_name, model_id = _runs(results, args, _target(results, args))
    result = fit(runs, prior)
    token_s = streamed_token_s(results)
    if token_s is not None:  # the server's own CPU per token, in place of the shipped figure
        result = replace(
            result, coefficients=replace(result.coefficients, frontend_token_s=token_s)
        )
    calibration = Calibration(
        gpu=gpu_name,
        model=model_id,
        coefficients=result.coefficients.to_json(),
        fitted_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        path=args.out or calibration_path(),
        results_files=tuple(str(p) for p in args.results),
        num_requests=result.num_requests,
        fit_error_before=result.error_before,
        fit_error_after=result.error_after,
    )
    if not args.dry_run:
        save_calibration(calibration)
    _report(calibration, prior, result, args)
    return 0


def _report(
    calibration: Calibration,
    prior: StepTimeCoefficients,
    result: FitResult,
    args: argparse.Namespace,
) -> None:
    where = "not stored (--dry-run)" if args.dry_run else f"stored in {calibration.path}"
    if args.json:
        body: dict[str, Any] = {
            "gpu": calibration.gpu,
            "model": calibration.model,
            "num_requests": result.num_requests,
            "num_rounds": result.num_rounds,
            "coefficients_before": prior.to_json(),
            "coefficients_after": calibration.coefficients,
            "fit_error_before": result.error_before,
            "fit_error_after": result.error_after,
            "path": None if args.dry_run else str(calibration.path),
        }
        print(json.dumps(body, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"step-time calibration: {calibration.gpu} / {calibration.model}")
    for column in ("", "before (shipped)", "after (fitted)"):
        table.add_column(column, justify="right" if column else "left")
    for name, value in prior.to_json().items():
        table.add_row(name, f"{value:.4g}", f"{calibration.coefficients[name]:.4g}")
    for figure in result.error_before:
        before, after = result.error_before[figure], result.error_after[figure]
        table.add_row(f"median error, {figure}", f"{before:.1%}", f"{after:.1%}")
    console = Console()
    console.print(table)
    console.print(f"{result.num_requests} measured requests, {result.num_rounds} rounds; {where}")
