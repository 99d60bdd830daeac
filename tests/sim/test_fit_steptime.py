"""The shipped fit's stopping rule: deterministic, and more rounds never make it worse."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from fit_steptime import fit, one_round

from tests.sim.fidelity import load_cases

DATA = Path(__file__).resolve().parents[1] / "data/validation/serving_benchmarks.jsonl"


def _few_cases():  # type: ignore[no-untyped-def]
    cases, _ = load_cases(DATA)
    calm = [c for c in cases if not c.is_overloaded and c.source == "iog"]
    # one sweep on one GPU, and one on another: enough for a per-GPU set to differ
    return [c for c in calm if "Qwen-1.5B" in c.case_id][:6]


def test_more_rounds_never_score_worse_and_the_result_is_reproducible() -> None:
    cases = _few_cases()
    assert len(cases) >= 4
    short = fit(cases, rounds=1, verbose=False)
    longer = fit(cases, rounds=4, patience=4, verbose=False)
    # the scores each result claims are what the simulator gives with its coefficients
    for outcome in (short, longer):
        _, rescored = one_round(cases, outcome.fitted)
        assert rescored == min(outcome.scores)
    assert min(longer.scores) <= min(short.scores)
    assert longer.scores[:2] == short.scores  # the same rounds, bit for bit
    assert min(short.scores) < short.scores[0]  # the fit improves on the prior
    again = fit(cases, rounds=4, patience=4, verbose=False)
    assert again.fitted == longer.fitted and again.scores == longer.scores


def test_the_fit_stops_after_rounds_without_a_better_score() -> None:
    outcome = fit(_few_cases(), rounds=12, patience=1, verbose=False)
    rounds_run = len(outcome.scores) - 1
    assert rounds_run == 12 or rounds_run == outcome.best_round + 1
    assert outcome.scores[outcome.best_round] == min(outcome.scores)


def test_written_sets_leave_the_measured_api_server_token_cost_to_frontend_py(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refit must not freeze today's frontend_token_s into every shipped set: with it in
    FITTED, a new measurement in frontend.py would never reach the simulator."""
    import fit_steptime

    from kvwise.sim import coefficients
    from kvwise.sim.frontend import FRONTEND_TOKEN_S
    from kvwise.sim.steptime import StepTimeCoefficients

    target = tmp_path / "coefficients.py"
    target.write_text(Path(coefficients.__file__).read_text())
    monkeypatch.setattr(fit_steptime, "COEFFICIENTS_PY", target)
    fit_steptime.write({"default": StepTimeCoefficients(frontend_token_s=1e-3)}, "test")
    namespace: dict[str, object] = {}
    exec(compile(target.read_text(), str(target), "exec"), namespace)
    written = namespace["FITTED"]["default"]  # type: ignore[index]
    assert "frontend_token_s" not in written
    assert StepTimeCoefficients(**written).frontend_token_s == FRONTEND_TOKEN_S
    assert written["kv_read"] == StepTimeCoefficients().kv_read
