"""Out-of-sample: public SGLang start-ups collected after the SGLang planner's rules were fixed
(tests/data/validation/unseen/sglang_startup_logs_unseen.jsonl). Nothing was tuned on them.

Run with -s to print every record: planned or not (and why not), KV tokens, verdict."""

from __future__ import annotations

from tests.planner.sglang_accuracy import UNSEEN, records, score_batch


def test_every_unseen_record_quotes_its_source_once() -> None:
    sources = [r["source"] for r in records(UNSEEN)]
    assert len(sources) == len(set(sources))
    for record in records(UNSEEN):
        assert record["source"].startswith("https://")
        assert record["excerpt"]
        assert record["split"] == "unseen"
        if record["max_total_num_tokens"] is not None:
            assert str(record["max_total_num_tokens"]) in record["excerpt"]


def test_planner_figures_on_the_unseen_set() -> None:
    figures = score_batch("unseen", UNSEEN, 40)
    errors, verdicts = figures.token_errors, figures.verdicts
    # floors at the figures measured once on this set (see benchmarks/results/
    # sglang_planner_accuracy.txt), less a small margin; a regression fails.
    # measured 2026-12-02: 1 KV case, |error| 13.4% (a log that names no release, planned with
    # the newest family); no verdict known
    assert len(errors) >= 1
    assert max(errors) < 0.15
    assert all(verdicts)
