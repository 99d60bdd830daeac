"""Out-of-sample: public SGLang start-ups collected after the SGLang planner's rules were fixed
(tests/data/validation/unseen/sglang_startup_logs_unseen.jsonl). Nothing was tuned on them.

Run with -s to print every record: planned or not (and why not), KV tokens, verdict."""

from __future__ import annotations

import statistics

from tests.planner.sglang_accuracy import UNSEEN, records, score, unscored_reason


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
    errors: list[float] = []
    verdicts: list[bool] = []
    for record in records(UNSEEN):
        reason = unscored_reason(record)
        case = score(record)
        if case is None:
            print(f"unseen {record['id']:40} not planned: {reason}")
            continue
        err = case.token_error
        right = None if case.logged_starts is None else case.predicted_starts == case.logged_starts
        print(
            f"unseen {case.family:12} {case.id:40} predicted {case.predicted_tokens:>9,} "
            f"logged {case.logged_tokens or 0:>9,} error {err if err is None else f'{err:+.1%}'} "
            f"verdict {'unknown' if right is None else 'right' if right else 'WRONG'}"
        )
        if err is not None:
            errors.append(abs(err))
        if right is not None:
            verdicts.append(right)
    if errors:
        print(
            f"unseen KV tokens: n={len(errors)} median {statistics.median(errors):.1%} "
            f"worst {max(errors):.1%}; verdicts right {sum(verdicts)}/{len(verdicts)}"
        )
    # floors at the figures measured once on this set (see benchmarks/results/
    # sglang_planner_accuracy.txt), less a small margin; a regression fails.
    # measured 2026-12-02: 1 KV case, |error| 13.4% (a log that names no release, planned with
    # the newest family); no verdict known
    assert len(errors) >= 1
    assert max(errors) < 0.15
    assert all(verdicts)
