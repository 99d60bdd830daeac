"""Figures per GPU class and load regime: every case classified, every left-out point named."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.sim.fidelity import Outcome, load_cases
from tests.sim.loso import excluded, gpu_class, regime

DATA = Path(__file__).resolve().parents[1] / "data/validation/serving_benchmarks.jsonl"


def test_every_case_has_a_class_and_a_regime_and_every_regime_has_cases() -> None:
    cases, _ = load_cases(DATA)
    by_cell = Counter((gpu_class(c), regime(c)) for c in cases)
    assert sum(by_cell.values()) == len(cases)
    for cls in ("consumer", "datacenter"):
        assert by_cell[cls, "low"] > 0 and by_cell[cls, "saturation"] > 0
    # a sweep's 1 request/s point is low load; a single client at a time is low load
    one_qps = next(c for c in cases if "200prompts1qps" in c.case_id)
    assert regime(one_qps) == "low"
    assert all(regime(c) == "low" for c in cases if c.workload.max_concurrency == 1)
    assert all(regime(c) == "overload" for c in cases if c.is_overloaded)


def test_the_rtx_4090_multi_gpu_ttft_points_are_named_with_their_reason() -> None:
    cases, skipped = load_cases(DATA)
    outcomes = [Outcome(c, {}, {}, False) for c in cases]
    lines = excluded(outcomes, skipped)
    unexplained = [line for line in lines if "TTFT not explained by load" in line]
    # median TTFT of each of the 20 points (mean TTFT is not among the scored figures)
    assert len(unexplained) == 20
    assert all("RTX" in line and "median_ttft_ms" in line for line in unexplained)
    assert sum("all metrics" in line for line in lines) == len(skipped)
