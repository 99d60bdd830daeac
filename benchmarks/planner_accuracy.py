"""The planner against real vLLM start-up logs, in-sample and out-of-sample, per release family.

In-sample: tests/data/validation/vllm_startup_logs.jsonl, the logs the planner's fitted constants
were fitted on. Out-of-sample: tests/data/validation/unseen/*.jsonl, public logs collected after
the constants were set and never used to fit them, reported as two sets: batches a-c (some
records examined one by one while release rules were fixed) and the held-out batch d. Every
case that could not be planned, or got the wrong start/fail verdict, is listed with the reason.

    .venv/bin/python benchmarks/planner_accuracy.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.planner.accuracy import (
    by_family,
    load,
    report_lines,
    report_sets,
    score_all,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="machine-readable figures")
    args = parser.parse_args()
    sets = report_sets()
    scored = {label: score_all(load(paths)) for label, paths in sets.items()}
    if args.json:
        out = {
            label: {
                "families": [
                    {
                        **asdict(row),
                        "median_error": row.median_error,
                        "worst_error": row.worst_error,
                    }
                    for row in by_family(label, cases)
                ],
                "cases": [{**asdict(c), "token_error": c.token_error} for c in cases],
            }
            for label, cases in scored.items()
        }
        print(json.dumps(out, indent=1))
        return 0
    for label, cases in scored.items():
        for line in report_lines(label, cases):
            print(line)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
