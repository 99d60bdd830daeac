"""`kvwise bench` mistakes a user can make: one line, the right exit code, no traceback."""

from __future__ import annotations

import pytest

from kvwise.cli import main
from kvwise.sim.workload_flags import spec_from_args


def test_predict_without_a_gpu_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "http://127.0.0.1:9", "--predict"]) == 2
    assert capsys.readouterr().err.strip() == (
        "kvwise bench: error: --predict needs --gpu (the GPU the server runs on)"
    )


def test_an_unreachable_server_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "http://127.0.0.1:9/v1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kvwise bench: error: http://127.0.0.1:9: cannot reach the server")
    assert "Traceback" not in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (["--max-concurrency", "1,x"], "not a list of integers"),
        (["--max-concurrency", "0"], "at least 1"),
        (["--workload", "chatty"], "unknown workload 'chatty'"),
        (["--think-time-s", "-1"], "--think-time-s must not be negative"),
    ],
)
def test_bad_workload_flags_name_the_flag(
    flag: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "http://127.0.0.1:9", *flag]) == 2
    assert message in capsys.readouterr().err


def test_workload_flags_are_the_specs_fields() -> None:
    from kvwise.bench.cli import build_parser

    args = build_parser().parse_args(
        ["http://x", "--sessions", "3", "--turns", "2", "--system-prompt", "64",
         "--request-rate", "2.5", "--max-tokens", "32"]
    )  # fmt: skip
    spec = spec_from_args(args, skip=("max_concurrency",))
    assert (spec.kind, spec.sessions, spec.turns, spec.system_prompt_tokens) == ("agent", 3, 2, 64)
    assert (spec.request_rate, spec.max_tokens, spec.max_concurrency) == (2.5, 32, None)
