"""`kvwise doctor` on logged vLLM failures: root cause right or not, per case, and the accuracy.

Feeds each failure record's `excerpt` + `error_text` (what a user pastes) and compares the
doctor's kind with the record's `failure_kind`, read through the mapping documented in
tests/doctor/dataset_kinds.py (a `cuda_oom` record is right for any out-of-memory kind the
doctor can place). Point it at any file of the same format, e.g. the held-back cases:

    .venv/bin/python benchmarks/doctor_accuracy.py [path/to/vllm_startup_logs.jsonl]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from kvwise.doctor.diagnose import diagnose

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the mapping in tests/doctor

from tests.doctor.dataset_kinds import DATASET_KINDS

DATA = (
    Path(__file__).resolve().parents[1]
    / "tests"
    / "data"
    / "validation"
    / "vllm_startup_logs.jsonl"
)


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pasted(record: dict[str, Any]) -> bytes:
    """What a user pastes: the log excerpt and the error text."""
    return "\n".join(filter(None, (record["excerpt"], record["error_text"]))).encode()


def main(path: Path) -> int:
    failures = [r for r in load(path) if r["outcome"] == "failure"]
    right = crashed = 0
    started = time.perf_counter()
    for record in failures:
        try:
            report = diagnose(pasted(record))
        except Exception as exc:  # a crash is what this script exists to count
            crashed += 1
            print(f"CRASH  {record['id']}: {exc!r}")
            continue
        kind = report.diagnosis.kind
        ok = kind in DATASET_KINDS.get(record["failure_kind"], frozenset({record["failure_kind"]}))
        right += ok
        print(f"{'ok   ' if ok else 'MISS '} {record['id']}: {record['failure_kind']} -> {kind}")
    elapsed = time.perf_counter() - started
    print(
        f"\n{right}/{len(failures)} right ({right / max(len(failures), 1):.0%}), {crashed} crashed,"
        f" {elapsed / max(len(failures), 1) * 1000:.0f} ms per log"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA))
