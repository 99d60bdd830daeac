"""Set e (validation/unseen/serving_benchmarks_e.jsonl): collected without running the simulator
and scored once, on 2026-12-02 after the last step-time change (benchmarks/results/
sim_fidelity_unseen_e.txt). A record the reader cannot turn into a case would silently drop out
of that score; the figures of that one scoring guard against regressions, as for the first
unseen file (no bar: it would invite tuning on a held-out set)."""

from __future__ import annotations

import json
import statistics
from functools import cache
from pathlib import Path

from kvwise.core.gpus import find_gpu
from tests.sim.fidelity import Outcome
from tests.sim.fidelity_unseen import evaluate_unseen, gpu_class, load_spec, load_unseen
from tests.sim.loso import regime

DATA = Path(__file__).resolve().parents[1] / "data/validation/unseen/serving_benchmarks_e.jsonl"


def _records() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def test_every_set_e_record_becomes_a_case_with_a_catalog_model_and_gpu() -> None:
    cases, skipped = load_unseen(DATA)
    assert not skipped, [f"{s.case_id}: {s.reason}" for s in skipped]
    assert sorted(c.case_id for c in cases) == sorted(r["id"] for r in _records())
    for case in cases:
        find_gpu(case.gpu)  # raises on a GPU outside the catalog
        assert load_spec(case.model).num_layers > 0


def test_set_e_cases_keep_the_stated_workload_and_measurements() -> None:
    records = {r["id"]: r for r in _records()}
    for case in load_unseen(DATA)[0]:
        w, m = records[case.case_id]["workload"], records[case.case_id]["metrics"]
        assert case.workload.input_len == w["random_input_len"]
        assert case.workload.max_tokens == w["random_output_len"]
        assert case.workload.max_concurrency == w["max_concurrency"]
        assert case.measured.output_throughput == m.get("output_throughput_tok_s")
        assert case.measured.median_ttft_ms == m.get("ttft_median_ms")
        assert case.measured.mean_tpot_ms == m.get("tpot_mean_ms")


# the one scoring: consumer cards at low load (RTX 5090 / 5070 Ti), median |error| (n):
# output throughput 4.7 % (27), median TTFT 13.3 % (26)
SCORED_ONCE = {"output_throughput": 0.047, "median_ttft_ms": 0.133}
REGRESSION_MARGIN = 0.03


@cache
def _outcomes() -> list[Outcome]:
    outcomes, skipped = evaluate_unseen(DATA)
    assert not skipped
    return outcomes


def test_set_e_consumer_low_load_does_not_regress_past_its_one_scoring() -> None:
    chosen = [o for o in _outcomes() if (gpu_class(o.case), regime(o.case)) == ("consumer", "low")]
    for metric, before in SCORED_ONCE.items():
        errors = [abs(o.errors[metric]) for o in chosen if metric in o.errors]
        assert len(errors) >= 25, metric
        assert statistics.median(errors) <= before + REGRESSION_MARGIN, metric
