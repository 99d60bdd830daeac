"""Simulator fidelity on the validation serving measurements, per GPU and per source.

    .venv/bin/python benchmarks/sim_fidelity.py [--data PATH] [--json] [--cases] [--loso [--jobs N]]
    .venv/bin/python benchmarks/sim_fidelity.py --unseen [--cases] [--unseen-file PATH]

Prints the median |relative error| of output throughput, mean TPOT and median TTFT on the
sub-saturation points (all, those the coefficients were fitted on, those held out), per GPU and
per source, and whether the overloaded points are predicted to queue or preempt. `--cases` adds
one line per case. Then the figures per GPU class and load regime, in sample and (with
`--loso`, which refits once per source: minutes) leave-one-source-out, and every point left out
of them with its reason (tests/sim/loso.py). The bars are checked by tests/sim/test_fidelity.py.
`--unseen` scores the out-of-sample file (validation/unseen, readers in
tests/sim/fidelity_unseen_readers.py) instead: nothing was fitted on it. `--unseen-file`
scores another held-out file in the same layout (the fresh set e:
tests/data/validation/unseen/serving_benchmarks_e.jsonl).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the harness in tests/sim
sys.path.insert(0, str(Path(__file__).resolve().parent))  # fit_steptime, for --loso

from tests.sim.fidelity import evaluate, load_cases, report_lines
from tests.sim.loso import loso_outcomes, report

DEFAULT_DATA = (
    Path(__file__).resolve().parents[1] / "tests/data/validation/serving_benchmarks.jsonl"
)

UNSEEN_DATA = DEFAULT_DATA.parent / "unseen/serving_benchmarks_unseen.jsonl"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cases", action="store_true", help="one line per case")
    parser.add_argument("--loso", action="store_true", help="leave-one-source-out refits")
    parser.add_argument("--rounds", type=int, default=12, help="--loso: most refit rounds")
    parser.add_argument("--jobs", type=int, default=1, help="--loso: sources refitted at once")
    parser.add_argument("--unseen", action="store_true", help="the out-of-sample file")
    parser.add_argument("--unseen-file", help="another out-of-sample file (implies --unseen)")
    args = parser.parse_args(argv)
    started = time.process_time()
    if args.unseen_file:
        return _unseen(args.cases, started, Path(args.unseen_file))
    if args.unseen or Path(args.data).resolve() == UNSEEN_DATA.resolve():
        return _unseen(args.cases, started, UNSEEN_DATA)
    outcomes, skipped, summary = evaluate(args.data)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    if args.cases:
        for o in outcomes:
            tag = (
                "overload"
                if o.case.is_overloaded
                else ("held-out" if o.case.is_held_out else "fitted")
            )
            errors = "  ".join(f"{k} {v:+.0%}" for k, v in o.errors.items())
            print(f"{o.case.case_id[:78]:<78} {tag:<8} {errors}")
        for s in skipped:
            print(f"{s.case_id[:78]:<78} skipped: {s.reason[:60]}")
    print("\n".join(report_lines(summary)))
    loso = None
    if args.loso:
        loso, notes = loso_outcomes(load_cases(args.data)[0], args.rounds, args.jobs)
        print("\n".join(notes))
    print("\n".join(report(outcomes, loso, skipped)))
    print(
        f"{len(outcomes)} cases simulated, {len(skipped)} skipped, {time.process_time() - started:.0f} s CPU"
    )
    return 0


def _unseen(cases: bool, started: float, path: Path) -> int:
    from tests.sim.fidelity_unseen import evaluate_unseen, unseen_report

    outcomes, skipped = evaluate_unseen(path)
    if cases:
        for o in outcomes:
            errors = "  ".join(f"{k} {v:+.0%}" for k, v in o.errors.items())
            print(
                f"{o.case.case_id[:90]:<90} {'overload' if o.case.is_overloaded else '':<8} {errors}"
            )
    print("\n".join(unseen_report(outcomes, skipped)))
    print(
        f"{len(outcomes)} cases simulated, {len(skipped)} skipped, {time.process_time() - started:.0f} s CPU"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
