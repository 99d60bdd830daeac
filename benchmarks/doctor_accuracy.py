"""`kvwise doctor` on logged vLLM and SGLang failures: cause, stage and fix right or not, per record.

In-sample: tests/data/validation/vllm_startup_logs.jsonl (the logs the doctor was built on).
Out-of-sample: the unseen start-up batches (tests/data/validation/unseen/startup_logs_{a..f}.jsonl
and sglang_startup_logs_*.jsonl), which the doctor's log reading was never built on; how each
record is scored, and which are left out and why, is in tests/doctor/out_of_sample.py.
Each record is fed as a user pastes it: its `excerpt` and its `error_text`.

    PYTHONPATH=src .venv/bin/python benchmarks/doctor_accuracy.py [BATCH ...]

BATCH is a vLLM batch letter (a-f) or `sglang`; none: every batch. Figures of a run are kept in
benchmarks/results/doctor_accuracy.txt.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the scorer in tests/doctor

from tests.doctor.out_of_sample import (
    SGLANG_BATCHES,
    VLLM_BATCHES,
    Batch,
    Scored,
    score_file,
    sglang_batches,
    vllm_batches,
)

IN_SAMPLE = Path(__file__).resolve().parents[1] / "tests" / "data" / "validation"


def _mark(ok: bool) -> str:
    return "ok  " if ok else "MISS"


def record_line(s: Scored) -> str:
    stage = (
        f"stage {_mark(s.stage_right)} {s.wanted_stage} -> {s.got_stage}"
        if s.wanted_stage is not None
        else f"stage not stated -> {s.got_stage}"
    )
    line = f"  {s.id}: cause {_mark(s.cause_right)} {s.wanted} -> {s.got}; {stage}"
    if s.fix is not None:
        given = s.fix_text if s.fix_given else "none"
        verdict = (
            "right"
            if s.fix_right
            else "no fix"
            if not s.fix_given
            else "not the user's flag or direction"
            if not s.fix_same_way
            else "the user's flag and direction, not re-planned to start"
        )
        line += f"\n      user's fix {s.fix.flags} ({s.fix.quote}); doctor: {given} -> {verdict}"
    return line


def batch_lines(batch: Batch) -> list[str]:
    f = batch.figures()
    lines = [
        f"{batch.name}: {f['records']} failure records with a usable excerpt; "
        f"cause right {f['cause']}/{f['records']}; "
        f"stage right {f['stage']}/{f['stage_scored']} (records whose kind states a stage); "
        f"user's working fix stated in {f['fixes_stated']}: doctor gave a fix {f['fix_given']}, "
        f"the user's flag and direction {f['fix_same_way']}, re-planned to start "
        f"{f['fix_starts']}, both {f['fix_right']}; excluded {f['excluded']}"
    ]
    lines += [record_line(s) for s in batch.scored]
    lines += [f"  excluded {rid}: {why}" for rid, why in batch.excluded]
    return lines


def main(names: list[str]) -> int:
    started = time.perf_counter()
    batches: list[Batch] = []
    if not names:
        batches.append(score_file("in-sample", IN_SAMPLE / "vllm_startup_logs.jsonl"))
        batches += vllm_batches()
        batches += sglang_batches()
    for name in names:
        if name in VLLM_BATCHES:
            batches += vllm_batches([name])
        elif name == "sglang":
            batches += sglang_batches(SGLANG_BATCHES)
        else:
            print(f"unknown batch {name!r}: a-f or sglang", file=sys.stderr)
            return 2
    for batch in batches:
        print("\n".join(batch_lines(batch)))
    total = sum(len(b.scored) for b in batches)
    elapsed = time.perf_counter() - started
    print(f"\n{total} records, {elapsed / max(total, 1) * 1000:.0f} ms per log")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
