"""bench fits its default workload to the endpoint's context before sending anything."""

from __future__ import annotations

import pytest

from kvwise.bench.sizing import fit_to_context, longest_request_tokens
from kvwise.sim.workloads import WorkloadSpec


@pytest.mark.parametrize("max_model_len", [512, 2048, 8192])
@pytest.mark.parametrize("kind", ["agent", "random", "shared-prefix"])
def test_default_sizes_are_scaled_to_fit_the_context(kind: str, max_model_len: int) -> None:
    spec = WorkloadSpec(kind=kind, output_len=512 if kind == "agent" else 128).validate()
    assert longest_request_tokens(spec) > max_model_len or kind != "agent"
    fitted, note = fit_to_context(spec, max_model_len, stated=set())
    assert longest_request_tokens(fitted) <= max_model_len
    if longest_request_tokens(spec) > max_model_len:
        assert note and f"max_model_len {max_model_len:,}" in note
        assert fitted.validate() == fitted


def test_an_agent_keeps_several_turns_when_scaled() -> None:
    spec = WorkloadSpec(kind="agent", output_len=512).validate()
    fitted, _ = fit_to_context(spec, 2048, stated=set())
    assert fitted.turns >= 4 and fitted.sessions == spec.sessions
    assert fitted.system_prompt_tokens > fitted.user_tokens  # the shape is kept


def test_sizes_the_user_chose_are_kept_with_a_warning_naming_them() -> None:
    spec = WorkloadSpec(kind="agent", turns=30, system_prompt_tokens=2000).validate()
    kept, note = fit_to_context(spec, 2048, stated={"turns", "system_prompt_tokens"})
    assert kept == spec
    assert note and note.startswith("warning") and "--turns" in note and "--system-prompt" in note


def test_a_workload_that_fits_or_an_unknown_context_is_left_alone() -> None:
    spec = WorkloadSpec(kind="random", input_len=100, output_len=20).validate()
    assert fit_to_context(spec, 2048, stated=set()) == (spec, None)
    big = WorkloadSpec(kind="agent").validate()
    assert fit_to_context(big, None, stated=set()) == (big, None)
