"""Public SGLang start-ups: the planner's KV tokens and verdicts, fit and held-out halves.

Run with -s to print the figures per release family."""

from __future__ import annotations

import hashlib

from tests.planner.sglang_accuracy import records, scored


def test_every_record_quotes_its_source_and_lands_in_the_half_its_url_hashes_to() -> None:
    for record in records():
        assert record["source"].startswith("https://")
        assert record["excerpt"]
        digest = int(hashlib.sha256(record["source"].encode()).hexdigest()[:8], 16)
        assert record["split"] == ("fit" if digest % 2 == 0 else "held_out")


def _report(split: str) -> list[float]:
    errors = []
    for case in scored(split):
        err = case.token_error
        print(
            f"{split:8} {case.family:12} {case.id:40} predicted {case.predicted_tokens:>9,} "
            f"logged {case.logged_tokens or 0:>9,} error {err if err is None else f'{err:+.1%}'} "
            f"verdict {'right' if case.predicted_starts == case.logged_starts else 'WRONG'}"
        )
        if err is not None:
            errors.append(abs(err))
    return errors


def test_kv_tokens_and_verdicts_on_both_halves() -> None:
    fit, held_out = _report("fit"), _report("held_out")
    # floors at today's figures: a regression on either half fails. The fit-half miss (-12%) is
    # a log that names no release, planned with the newest release's default fraction.
    assert len(fit) >= 2 and len(held_out) >= 1
    assert all(e < 0.13 for e in fit) and all(e < 0.06 for e in held_out)
    for split in ("fit", "held_out"):
        assert all(c.predicted_starts == c.logged_starts for c in scored(split))
