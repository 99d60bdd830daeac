"""Fidelity per GPU class and load regime, in sample and leave-one-source-out, with every
point left out of a figure named with its reason.

    in sample     each case simulated with the shipped coefficients (fitted on the training
                  cases of every source, `benchmarks/fit_steptime.py`)
    LOSO          each source's cases simulated with coefficients refitted on the training
                  cases of the other sources only (a GPU only that source measured falls back
                  to its family's or the all-GPU set, `coefficients.choose`, as a GPU without
                  data does for a user)

GPU class: consumer (GeForce RTX) or datacenter. Load regime, from the measurements:
overload (`Case.is_overloaded`: a queue or failures), low (one request at a time, or an open
loop the server kept up with: output throughput within 10 % of the offered load), saturation
otherwise (closed loops, all-at-once, open loops the server fell behind).
"""

from __future__ import annotations

import statistics

from kvwise.sim.bands import load_regime
from tests.sim.fidelity import METRICS, Case, Outcome, Skipped, compare, run_case

CONSUMER_PREFIXES = ("RTX",)
REGIMES = ("low", "saturation", "overload")


def gpu_class(case: Case) -> str:
    return "consumer" if case.gpu.startswith(CONSUMER_PREFIXES) else "datacenter"


def regime(case: Case) -> str:
    """The measured regime, by the rule a prediction's band is looked up with."""
    w = case.workload
    return load_regime(
        case.is_overloaded,
        w.max_concurrency,
        w.request_rate,
        w.output_len,
        case.measured.output_throughput,
    )


def excluded(outcomes: list[Outcome], skipped: list[Skipped]) -> list[str]:
    """Every (record, metric) that is not in the figures, and why."""
    # a reason's first two clauses ("not in the catalog: unknown model 'X'"), without the
    # lookup's details (local paths, cache folders)
    lines = [f"{s.case_id}: all metrics: {': '.join(s.reason.split(': ')[:2])}" for s in skipped]
    for o in outcomes:
        for metric in METRICS:
            if metric in o.errors:
                continue
            if o.case.ttft_unexplained and "ttft" in metric:
                why = "TTFT not explained by load (the sweep's lowest rate already queues)"
            else:
                why = "not published by the source"
            lines.append(f"{o.case.case_id}: {metric}: {why}")
    return lines


def table(outcomes: list[Outcome]) -> dict[tuple[str, str], dict[str, tuple[float | None, int]]]:
    """(class, regime) -> metric -> (median |relative error|, n)."""
    cells: dict[tuple[str, str], dict[str, tuple[float | None, int]]] = {}
    for cls in ("consumer", "datacenter"):
        for reg in REGIMES:
            chosen = [o for o in outcomes if gpu_class(o.case) == cls and regime(o.case) == reg]
            row = {}
            for metric in METRICS:
                errs = [abs(o.errors[metric]) for o in chosen if metric in o.errors]
                row[metric] = (statistics.median(errs) if errs else None, len(errs))
            cells[cls, reg] = row
    return cells


def loso_outcomes(cases: list[Case], rounds: int, jobs: int = 1) -> tuple[list[Outcome], list[str]]:
    """Every case of every source scored with coefficients fitted without that source; `jobs`
    sources at a time, each in its own process (the same results: each refit is deterministic)."""
    sources = sorted({c.source for c in cases})
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs) as pool:
            parts = list(pool.map(_one_source, [(cases, s, rounds) for s in sources]))
    else:
        parts = [_one_source((cases, s, rounds)) for s in sources]
    outcomes = [o for found, _ in parts for o in found]
    return outcomes, [note for _, note in parts]


def _one_source(job: tuple[list[Case], str, int]) -> tuple[list[Outcome], str]:
    from fit_steptime import fit  # benchmarks/ on sys.path (the caller's)

    from kvwise.core.gpus import find_gpu
    from kvwise.sim.coefficients import choose

    cases, source, rounds = job
    training = [c for c in cases if not c.is_overloaded and not c.is_held_out]
    others = [c for c in training if c.source != source]
    fitted = fit(others, rounds, verbose=False).fitted
    outcomes = []
    for case in (c for c in cases if c.source == source):
        tp = case.flags.tensor_parallel_size or 1
        chosen = choose(fitted, find_gpu(case.gpu), tp)[0]
        outcomes.append(compare(case, run_case(case, chosen)))
    return outcomes, f"{source}: refitted on {len(others)} cases of the other sources"


def report(
    in_sample: list[Outcome], loso: list[Outcome] | None, skipped: list[Skipped]
) -> list[str]:
    def cell(value: tuple[float | None, int]) -> str:
        median, n = value
        return f"{'n/a' if median is None else f'{median:.1%}':>6} ({n:>2})"

    inside = table(in_sample)
    outside = table(loso) if loso is not None else None
    short = {"output_throughput": "throughput", "mean_tpot_ms": "TPOT", "median_ttft_ms": "TTFT"}
    head = "  ".join(f"{short[m]:>11} in / LOSO       " for m in METRICS)
    lines = [
        "median |relative error| per GPU class and load regime (n): in sample / LOSO",
        f"  {'class':<11} {'regime':<11} {head}",
    ]
    for (cls, reg), row in inside.items():
        cells = []
        for metric in METRICS:
            loso_cell = cell(outside[cls, reg][metric]) if outside else "      -     "
            cells.append(f"{cell(row[metric])} / {loso_cell}")
        lines.append(f"  {cls:<11} {reg:<11} " + "  ".join(cells))
    left_out = excluded(in_sample, skipped)
    lines.append(f"points left out of these figures: {len(left_out)}")
    lines += [f"  {line}" for line in left_out]
    return lines
