"""The planner's accuracy on real vLLM start-up logs, printed per release family on every run.

In-sample (the logs the constants were fitted on) and out-of-sample (public logs collected after
the constants were set, never fitted on) are reported apart; see tests/planner/accuracy.py. Every
case not planned, planned with the wrong verdict, or off by more than 8 % is named in the output.
The floors are today's measured figures less a small margin, so that a change that makes the
planner worse on data it was not tuned on fails here. They are not the targets: out of sample
the planner is still short of a 3 % / 8 % KV-token error on >= 80 % of the cases planned.
"""

from __future__ import annotations

import statistics

import pytest

from kvwise.errors import UnknownGpuError
from tests.planner.accuracy import (
    EXAMINED_BATCHES,
    IN_SAMPLE,
    Scored,
    batch_files,
    load,
    record_gpu,
    report_lines,
    score_all,
)


def _figures(scored: list[Scored]) -> tuple[int, float, float]:
    """(cases planned, median KV-token error, share of planned cases with vLLM's verdict)"""
    planned = [s for s in scored if s.is_planned]
    errors = [e for s in planned if (e := s.token_error) is not None]
    right = sum(1 for s in planned if s.is_verdict_right)
    return len(planned), statistics.median(errors), right / len(planned)


def _held_out(batch: str, cases: int, fidelity_report: list[str]) -> tuple[int, float, float]:
    """Score a held-out batch, print it, and check what every batch must hold: all its records
    scored once each, and every one not planned answered in one line; then its figures."""
    scored = score_all(load(batch_files(batch)))
    fidelity_report.extend(report_lines(f"planner held-out {batch}", scored))
    assert len(scored) >= cases and len({s.id for s in scored}) == len(scored)
    assert all(s.is_planned or (s.reason and "\n" not in s.reason) for s in scored)
    return _figures(scored)


def test_in_sample_figures_hold(fidelity_report: list[str]) -> None:
    scored = score_all(load(IN_SAMPLE))
    fidelity_report.extend(report_lines("planner in-sample", scored))
    planned, median_error, verdicts = _figures(scored)
    assert planned >= 24  # measured 25 of 42
    assert median_error <= 0.01
    assert verdicts >= 0.9


def test_out_of_sample_figures_do_not_regress(fidelity_report: list[str]) -> None:
    scored = score_all(load(batch_files(*EXAMINED_BATCHES)))
    fidelity_report.extend(report_lines("planner out-of-sample a-c", scored))
    assert len(scored) >= 100 and len({s.id for s in scored}) == len(scored)
    planned, median_error, verdicts = _figures(scored)
    # measured 33 of 102: most others name a checkpoint kvwise cannot read offline; three answer
    # "not modelled" for graph capture (NCCL in the graphs at TP 4/8 on PCIe: vLLM bounds it
    # nowhere, QwenLM/Qwen3#1387 held 6.1 GiB outside PyTorch), one is a host-side failure with
    # no host RAM
    assert planned >= 32
    # measured 5.0 % over 14 cases with a logged token count; under 4 % over 12 before the two
    # Qwen3.6-35B-A3B NVFP4 records became plannable (each +13 % with the prefix caching they
    # state: 'align' mode's two state pages per request; +18 % with one page)
    assert median_error <= 0.055
    # measured 25 of 33 (22 of 28 before the V2 warm-up counted the released profile peak; the
    # A800 80GB record of vllm#17431 planned since its card size is read is one of the 8: V1
    # failed where V0 started, which points at memory another process held; the T4 record with
    # a presumed default max_model_len is another since the profile run's own OOM is checked:
    # at the default 32,768 vLLM 0.6.6 cannot reach the KV error the log shows)
    assert verdicts >= 0.75
    # a case that cannot be planned says why in one line (the planner's own error), never a crash
    assert all(s.is_planned or (s.reason and "\n" not in s.reason) for s in scored)


def test_a_card_size_the_source_states_outside_the_log_names_the_card() -> None:
    # vllm#17431's log says only "A800" (a 40 GB and two 80 GB cards); the issue's collect_env
    # output says "NVIDIA A800 80GB PCIe", which the record carries as gpu_memory_gb
    (record,) = (
        r
        for r in load(batch_files("a"))
        if r["id"] == "a-vllm-17431-qwen3-8b-a800-gmu04-v1-nocache"
    )
    assert 79 < record_gpu(record).memory_gib < 80
    assert record_gpu({**record, "gpu_memory_gb": 40}).memory_gib < 41
    with pytest.raises(UnknownGpuError, match="fits 3 catalog cards"):
        record_gpu({**record, "gpu_memory_gb": None})


def test_held_out_figures_do_not_regress(fidelity_report: list[str]) -> None:
    # batch d: collected after every planner change then made, and scored once; the floors
    # below are that one scoring less a margin (see accuracy.HELD_OUT_BATCHES). The planner must
    # not be tuned on this batch's per-case output; a new held-out batch is the next check.
    planned, median_error, verdicts = _held_out("d", 31, fidelity_report)
    # scored once: 26 of 31 planned, 3.7 % over 24 cases (worst 52.7 %, 0.28 AWQ), 26 of 26
    # verdicts; since then 11 records were read while fixing rules and Qwen2.5-VL became plannable
    assert planned >= 28  # measured 30 of 31 (1 FP8 re-upload)
    assert median_error <= 0.05  # measured 3.1 % over 28 cases (2026-12-02 16:10)
    assert verdicts >= 0.9  # measured 29 of 29


def test_second_held_out_batch_figures_do_not_regress(fidelity_report: list[str]) -> None:
    # batch e: collected by someone who did not run the planner on it, scored once after the last
    # vLLM planner change (2026-12-02); the floors are that scoring less a margin. Its per-case
    # output must not be used to tune rules: the next check is a new batch.
    planned, median_error, verdicts = _held_out("e", 27, fidelity_report)
    # at its scoring: 26 of 27 planned, 4.2 % over 10 cases (worst 49.1 %), 22 of 26 verdicts;
    # the GTX 1080 record (a community build of 0.6.4) became plannable with the Pascal cards
    assert planned >= 26  # measured 27 of 27
    assert median_error <= 0.055  # measured 4.5 % over 11 cases (the GTX 1080 one +34 %)
    assert verdicts >= 0.8  # measured 23 of 27; two misses are halves of same-flag pairs


def test_third_held_out_batch_figures_do_not_regress(fidelity_report: list[str]) -> None:
    # batch f: collected by someone who neither ran the planner on it nor read planner code, and
    # scored once (2026-12-02 15:47 UTC) after the session's last vLLM rule change; the floors are
    # that scoring less a margin. Its per-case output must not be used to tune rules.
    planned, median_error, verdicts = _held_out("f", 28, fidelity_report)
    # at its scoring: 19 of 28 planned (9 re-uploads whose config.json is not in the test hub
    # cache), 5.7 % over 13 cases (worst 70.3 %), 14 of 19 verdicts. Its misses were read since
    # (unseen/README.md): after the rules that reading found (VLLM_USE_V1=0 taken, bitsandbytes'
    # nested absmax before 0.10, the fp8-KV V0 fallback through 0.10.1) 5.5 % (worst 34.9 %),
    # 15 of 19 verdicts, figures no longer held out; the floors stay those of the clean scoring
    assert planned >= 19
    assert median_error <= 0.065
    assert verdicts >= 0.7


def test_fourth_held_out_batch_figures_do_not_regress(fidelity_report: list[str]) -> None:
    # batch g: collected by someone who neither ran the planner on it nor read planner code, and
    # scored once (2026-12-02 18:46 UTC) after the session's last vLLM rule change; the floors are
    # that scoring less a margin. Its per-case output must not be used to tune rules.
    planned, median_error, verdicts = _held_out("g", 25, fidelity_report)
    # at its scoring: 21 of 25 planned (4 TP-4 starts without the custom all-reduce: "not
    # modelled"), 1.9 % over 20 cases (worst 25.0 %, a GB10 at utilization 0.30), 20 of 21 verdicts
    assert planned >= 20
    assert median_error <= 0.03
    assert verdicts >= 0.85
