"""Out-of-sample error bands for every simulator prediction: src/kvwise/sim/data/error_bands.json.

    HF_HUB_OFFLINE=1 PYTHONPATH=$PWD/src .venv/bin/python benchmarks/error_bands.py [--jobs N] [--write]

Scores the simulator only where it had not seen the answer: every source of
tests/data/validation/serving_benchmarks.jsonl with coefficients refitted without that source
(leave-one-source-out, tests/sim/loso.py: minutes) and every scored record of
tests/data/validation/unseen/serving_benchmarks_unseen.jsonl (nothing fitted on it,
tests/sim/fidelity_unseen.py). Each point is binned by GPU class and by the regime the
simulation itself predicted (kvwise.sim.bands.predicted_regime: what a user's prediction is
looked up by), and per metric the 10th, 50th and 90th percentiles of the signed relative error
(predicted - measured) / measured are kept, with n, per cell; pooled cells (any class, any
regime) are the fallbacks for cells under kvwise.sim.bands.MIN_POINTS. In-sample errors are
never used. The per-point errors are kept in the file (`points`) so that the cells can be
checked against them and against benchmarks/results/sim_fidelity*.txt.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the harness in tests/sim
sys.path.insert(0, str(ROOT / "benchmarks"))  # fit_steptime, for the LOSO refits

import numpy as np  # noqa: E402
from tests.sim.fidelity import Case, Outcome, load_cases  # noqa: E402
from tests.sim.fidelity_unseen import evaluate_unseen  # noqa: E402
from tests.sim.loso import loso_outcomes, regime  # noqa: E402

from kvwise.core.gpus import find_gpu  # noqa: E402
from kvwise.sim.bands import BAND_METRICS, gpu_class, load_regime, predicts_overload  # noqa: E402
from kvwise.sim.coefficients import coefficients_with_source  # noqa: E402

DATA = ROOT / "tests/data/validation/serving_benchmarks.jsonl"
UNSEEN = DATA.parent / "unseen/serving_benchmarks_unseen.jsonl"
OUT = ROOT / "src/kvwise/sim/data/error_bands.json"
CLASSES = ("consumer", "workstation", "datacenter", "any")
REGIMES = ("low", "saturation", "overload", "any")


def point(dataset: str, o: Outcome) -> dict[str, Any]:
    w = o.case.workload
    predicted = load_regime(
        predicts_overload(o.predicted),
        w.max_concurrency,
        w.request_rate,
        w.output_len,
        o.predicted.get("output_throughput"),
    )
    return {
        "dataset": dataset,
        "case": o.case.case_id,
        "gpu": o.case.gpu,
        "class": gpu_class(o.case.gpu),
        "regime": predicted,
        "measured_regime": regime(o.case),
        # where the shipped step-time set comes from (unseen only: the LOSO refits differ)
        "coefficients": coefficient_kind(o.case) if dataset == "unseen" else None,
        "errors": {m: round(o.errors[m], 4) for m in BAND_METRICS if m in o.errors},
    }


def coefficient_kind(case: Case) -> str:
    """own (the card's measurements), family (a sibling's), or all-GPU (kvwise.sim.coefficients.choose)."""
    source = coefficients_with_source(find_gpu(case.gpu), case.flags.tensor_parallel_size or 1)[1]
    if source.startswith("fitted on measurements"):
        return "own"
    return "family" if "family, same kernels" in source else "all-GPU"


def by_coefficients(points: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Unseen points per coefficient source: p10/p50/p90 and n per metric (whether a card without
    its own measurements is predicted worse)."""
    table: dict[str, dict[str, Any]] = {}
    for kind in ("own", "family", "all-GPU"):
        chosen = [p for p in points if p.get("coefficients") == kind]
        row = {}
        for metric in BAND_METRICS:
            errs = [p["errors"][metric] for p in chosen if metric in p["errors"]]
            qs = [round(float(v), 4) for v in np.percentile(errs, [10, 50, 90])] if errs else []
            row[metric] = {"p10": qs[0] if qs else None, "p50": qs[1] if qs else None,
                           "p90": qs[2] if qs else None, "n": len(errs)}  # fmt: skip
        table[kind] = row
    return table


def cells(points: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {}
    for cls in CLASSES:
        for reg in REGIMES:
            chosen = [
                p for p in points if cls in ("any", p["class"]) and reg in ("any", p["regime"])
            ]
            row = {}
            for metric in BAND_METRICS:
                errs = [p["errors"][metric] for p in chosen if metric in p["errors"]]
                if errs:
                    p10, p50, p90 = (round(float(v), 4) for v in np.percentile(errs, [10, 50, 90]))
                    row[metric] = {"p10": p10, "p50": p50, "p90": p90, "n": len(errs)}
                else:
                    row[metric] = {"p10": None, "p50": None, "p90": None, "n": 0}
                row[metric]["n_by_dataset"] = {
                    d: sum(1 for p in chosen if p["dataset"] == d and metric in p["errors"])
                    for d in ("loso", "unseen")
                }
            table[f"{cls}/{reg}"] = row
    return table


def build(jobs: int, rounds: int) -> dict[str, Any]:
    loso, _notes = loso_outcomes(load_cases(DATA)[0], rounds, jobs)
    unseen, skipped = evaluate_unseen(UNSEEN)
    points = [point("loso", o) for o in loso] + [point("unseen", o) for o in unseen]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    return {
        "provenance": {
            "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": "HF_HUB_OFFLINE=1 PYTHONPATH=$PWD/src .venv/bin/python "
            f"benchmarks/error_bands.py --rounds {rounds} --write",
            "commit": commit,
            "data": {
                "loso": "tests/data/validation/serving_benchmarks.jsonl, each source scored "
                "with coefficients refitted without it (tests/sim/loso.py), "
                f"{len(loso)} points",
                "unseen": "tests/data/validation/unseen/serving_benchmarks_unseen.jsonl, "
                f"nothing fitted on it (tests/sim/fidelity_unseen.py), {len(unseen)} points "
                f"scored, {len(skipped)} records skipped with their reasons",
            },
            "in_sample": "never used",
            "error": "signed relative error (predicted - measured) / measured; p10/p50/p90 "
            "over the cell's points (numpy.percentile, linear)",
            "binning": "GPU class (kvwise.sim.bands.gpu_class) x the regime the simulation "
            "predicted (kvwise.sim.bands.predicted_regime); 'any' pools a dimension",
            "fallback": "a cell with n < 5 takes class/regime -> any/regime -> class/any -> "
            "any/any (kvwise.sim.bands.band)",
            "n": "points with that metric measured, per cell and per dataset",
        },
        "cells": cells(points),
        "by_coefficients_unseen": by_coefficients(points),
        "points": points,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1, help="LOSO sources refitted at once")
    parser.add_argument("--rounds", type=int, default=12, help="LOSO: most refit rounds")
    parser.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    table = build(args.jobs, args.rounds)
    text = json.dumps(table, indent=1) + "\n"
    if args.write:
        OUT.write_text(text)
    for key, row in table["cells"].items():
        print(
            f"{key:<22}"
            + "  ".join(
                f"{m[:10]:>10} "
                + (
                    f"{c['p10']:+6.0%}…{c['p90']:+6.0%} (n={c['n']:>3})"
                    if c["n"]
                    else "      no data      "
                )
                for m, c in row.items()
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
