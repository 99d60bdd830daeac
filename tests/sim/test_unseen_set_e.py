"""Set e (validation/unseen/serving_benchmarks_e.jsonl) is held out until the lead scores it
once: this file only reads it, as `sim_fidelity.py --unseen-file` will, and simulates nothing.
A record the reader cannot turn into a case would silently drop out of that score."""

from __future__ import annotations

import json
from pathlib import Path

from kvwise.core.gpus import find_gpu
from tests.sim.fidelity_unseen import load_spec, load_unseen

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
