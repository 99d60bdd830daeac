"""OUT-OF-SAMPLE: `kvwise doctor` on the unseen start-up batches (tests/data/validation/unseen/),
scored by tests/doctor/out_of_sample.py (cause, stage, the fix against the user's working fix;
every excluded record named there). `benchmarks/doctor_accuracy.py` prints the same per record;
benchmarks/results/doctor_accuracy.txt keeps the figures.

Floors: the measured counts less a tenth of the batch (rounded down: none in a batch under ten),
so that a change to the doctor that loses a record a small batch had right fails here. Batch d
(0 of its 2 failures right) has nothing to guard and is only printed by the benchmark.
- a-d and SGLang: measured after the doctor fixes made from their misses (2026-12-02), so these
  floors are out-of-sample for the doctor's design but not blind;
- e, f: held out and clean: their one scoring (2026-12-02 15:58 UTC, before any doctor change;
  cause 5/8 and 3/6, stage 5/7 and 3/6); no doctor change was made from them (e is now 6/8 causes
  since this session's doctor change that reads the sampler from the log);
- g: held out and clean, scored once (18:47 UTC): its one failure record, cause and stage right.
"""

from __future__ import annotations

import math

import pytest

from tests.doctor.out_of_sample import Batch, sglang_batches, vllm_batches

# batch -> (cause right, stage right, fix right) as measured
MEASURED = {
    "a": (25, 15, 0),
    "b": (11, 11, 0),
    "c": (13, 14, 1),
    "e": (5, 5, 1),  # held out, clean
    "f": (3, 3, 0),  # held out, clean
    "g": (1, 1, 0),  # held out, clean (one failure record)
    "sglang b": (2, 0, 0),
    "sglang c": (3, 1, 0),
}


def _floor(measured: int, total: int) -> int:
    return max(0, measured - math.floor(0.1 * total))


@pytest.fixture(scope="module")
def batches() -> dict[str, Batch]:
    return {b.name: b for b in [*vllm_batches(), *sglang_batches()]}


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_out_of_sample_doctor_keeps_its_measured_accuracy(
    name: str, batches: dict[str, Batch], fidelity_report: list[str]
) -> None:
    figures = batches[name].figures()
    cause, stage, fix = MEASURED[name]
    if name not in ("e", "f", "g"):  # e, f and g stay unread: their figures are the recorded ones
        fidelity_report.append(
            f"doctor out-of-sample {name}: cause {figures['cause']}/{figures['records']}, "
            f"stage {figures['stage']}/{figures['stage_scored']}, fix right "
            f"{figures['fix_right']}/{figures['fixes_stated']}"
        )
    assert figures["cause"] >= _floor(cause, figures["records"]), name
    assert figures["stage"] >= _floor(stage, figures["stage_scored"]), name
    assert figures["fix_right"] >= _floor(fix, figures["fixes_stated"]), name


def test_every_excluded_record_is_named_with_why(batches: dict[str, Batch]) -> None:
    for batch in batches.values():
        for record_id, why in batch.excluded:
            assert record_id and why
    # the one vLLM record left out states no failure kind
    assert [rid for rid, _ in batches["a"].excluded] == [
        "a-vllm-9630-llama32-11b-vision-h100-96g-seqs128"
    ]
