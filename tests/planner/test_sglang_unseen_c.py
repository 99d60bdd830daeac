"""Out-of-sample, third batch: public SGLang start-ups collected on 2026-12-02 15:10-15:40 with a
selection rule fixed before the first search, and scored once before any record was examined
(tests/data/validation/unseen/sglang_startup_logs_c.jsonl, sources in SGLANG_SOURCES.md).

Run with -s to print every record: planned or not (and why not), KV tokens, verdict."""

from __future__ import annotations

from tests.planner.sglang_accuracy import UNSEEN_B, UNSEEN_C, records, score_batch


def test_every_record_quotes_its_source_once_and_is_new() -> None:
    sources = [r["source"] for r in records(UNSEEN_C)]
    assert len(sources) == len(set(sources))
    assert not set(sources) & {r["source"] for r in records(UNSEEN_B)}
    for record in records(UNSEEN_C):
        assert record["source"].startswith("https://")
        assert record["excerpt"]
        assert record["split"] == "unseen"
        if record["max_total_num_tokens"] is not None:
            assert str(record["max_total_num_tokens"]) in record["excerpt"]


def test_planner_figures_on_the_third_unseen_batch() -> None:
    figures = score_batch("c", UNSEEN_C, 50)
    planned, errors, verdicts = figures.planned, figures.token_errors, figures.verdicts
    # floors at the figures measured on this batch before any examination
    # (benchmarks/results/sglang_planner_accuracy.txt): 5 of 21 planned, no logged pool among
    # them, the one known verdict (Gemma-3-12B's CUDA OOM on a 16 GB card) right
    assert planned >= 5
    assert len(verdicts) >= 1 and all(verdicts)
    assert all(e < 0.10 for e in errors)
