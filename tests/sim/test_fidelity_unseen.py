"""The simulator out of sample: validation/unseen/serving_benchmarks_unseen.jsonl, public vLLM
runs nothing was fitted on. No bar on the errors (they would invite tuning on the held-out
set): every record must be scored or skipped with its reason, at least as many points as the
committed run scored must be scored, and the figures are printed, labelled out-of-sample
(benchmarks/results/sim_fidelity_unseen.txt has the committed run). The whole file is scored:
about 20 s of CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.sim.fidelity_unseen import evaluate_unseen, load_unseen, unseen_report

DATA = (
    Path(__file__).resolve().parents[1] / "data/validation/unseen/serving_benchmarks_unseen.jsonl"
)
SCORED_IN_THE_COMMITTED_RUN = 188


def _record_ids() -> list[str]:
    return [json.loads(line)["id"] for line in DATA.read_text().splitlines() if line.strip()]


def test_every_unseen_record_is_scored_or_skipped_with_a_reason(
    fidelity_report: list[str],
) -> None:
    outcomes, skipped = evaluate_unseen(DATA)
    fidelity_report.append("OUT-OF-SAMPLE (validation/unseen, no coefficient fitted on it):")
    fidelity_report.extend(unseen_report(outcomes, skipped))
    scored = [o.case.case_id for o in outcomes]
    left_out = [s.case_id for s in skipped]
    assert sorted(scored + left_out) == sorted(_record_ids())
    assert all(s.reason.strip() for s in skipped)
    assert len(outcomes) >= SCORED_IN_THE_COMMITTED_RUN
    # every scored point is compared on at least one metric the source published
    assert all(o.errors for o in outcomes)


def test_a_replica_fleet_is_read_as_one_replica_with_its_share_of_the_load() -> None:
    cases, _ = load_unseen(DATA)
    by_id = {c.case_id: c for c in cases}
    record = next(
        json.loads(line)
        for line in DATA.read_text().splitlines()
        if '"replicas": 2' in line and json.loads(line)["id"] in by_id
    )
    case = by_id[record["id"]]
    w, m = record["workload"], record["metrics"]
    assert case.workload.max_concurrency == -(-int(w["max_concurrency"]) // 2)
    assert case.measured.output_throughput is not None
    assert abs(case.measured.output_throughput - m["output_throughput_tok_s"] / 2) < 1e-6
    assert any("replicas behind NGINX" in note for note in case.notes)


def test_sglang_random_lengths_are_drawn_up_to_the_stated_length() -> None:
    cases, _ = load_unseen(DATA)
    case = next(c for c in cases if c.source == "livinfly" and c.workload.kind == "random")
    stated = case.workload.max_tokens
    assert stated is not None
    # sglang bench_serving draws uniform lengths in [1, L]: the mean is about half of L
    assert abs(case.workload.output_len - stated / 2) <= 1
    longest = case.workload.output_len * (1 + case.workload.range_ratio)
    assert longest <= stated
