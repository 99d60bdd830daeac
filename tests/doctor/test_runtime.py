"""Failures while serving: over-long requests (HTTP 400), preemption, a dead engine, timeouts.

The wordings are vLLM's own across releases (V0 `serving_chat`/`serving_engine` "you requested
N tokens", V1 "your request has N input tokens", "'max_tokens' ... is too large", the engine's
"The decoder prompt (length N) is longer than the maximum model length of M"); the fixes are
checked against the real planner.
"""

from __future__ import annotations

import pytest

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.doctor import kinds
from kvwise.doctor.diagnose import diagnose
from kvwise.doctor.parse import parse_log
from kvwise.doctor.runtime import over_long
from kvwise.doctor.text import read_log
from kvwise.planner import plan
from tests.doctor.cases import CASES
from tests.doctor.logs import render

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"  # 131,072 tokens in its config.json


@pytest.mark.parametrize(
    ("case", "limit", "requested"),
    [
        ("v0 chat request over max_model_len", 32768, 33000),  # prompt + completion
        ("v1 input tokens over max_model_len", 32768, 40000),
        ("v1 max_tokens too large", 32768, 33500),  # 31,500 input + 2,000 asked
        ("v1 engine input check", 32768, 33000),
        ("agent client's 400", 32768, 33000),
    ],
)
def test_each_wording_gives_the_limit_and_the_request(
    case: str, limit: int, requested: int
) -> None:
    found = over_long(parse_log(read_log(render(CASES[case][1]()))))
    assert found is not None
    assert (found.limit, found.requested) == (limit, requested)


@pytest.mark.parametrize(
    ("message", "limit", "requested"),
    [
        # the OpenAI server's check on prompt + max_tokens in later releases
        (
            "This model's maximum context length is 32768 tokens. However, you requested 4000 "
            "output tokens and your prompt contains at least 30001 input tokens, for a total of "
            "at least 34001 tokens. Please reduce the length of the input prompt or the number "
            "of requested output tokens.",
            32768,
            34001,
        ),
        # V0 engine's warning for a prompt over the limit (the request is then ignored)
        (
            "WARNING 05-01 10:00:00 llm_engine.py:1234] Input prompt (33000 tokens) is too long "
            "and exceeds limit of 32768",
            32768,
            33000,
        ),
    ],
)
def test_other_wordings(message: str, limit: int, requested: int) -> None:
    parsed = parse_log(read_log(message.encode()))
    found = over_long(parsed)
    assert found is not None and (found.limit, found.requested) == (limit, requested)
    assert diagnose(message.encode()).diagnosis.kind == kinds.CONTEXT_LENGTH


def _over_long_log(limit: int, *requests: int, port_line: str = "") -> bytes:
    lines = [
        "INFO 08-29 02:00:00 [api_server.py:1805] vLLM API server version 0.10.1.1",
        f"INFO 08-29 02:00:01 [utils.py:326] non-default args: {{'model': '{LLAMA}', "
        f"'max_model_len': {limit}}}",
        port_line,
    ]
    lines += [
        "ERROR 08-29 02:10:09 [serving_chat.py:222] Error in preprocessing prompt inputs: This "
        f"model's maximum context length is {limit} tokens. However, your request has {n} input "
        "tokens. Please reduce the length of the input messages."
        for n in requests
    ]
    return "\n".join(line for line in lines if line).encode()


def test_a_longer_max_model_len_when_the_gpu_holds_it_with_planner_numbers() -> None:
    report = diagnose(_over_long_log(16384, 20000, 21000), gpu_hint="rtx4090")
    assert report.diagnosis.kind == kinds.CONTEXT_LENGTH
    assert "2 requests were rejected" in report.diagnosis.summary
    best = report.prescription.best
    assert best is not None and best.changes == {"max_model_len": 21248}  # 21,000 in 256s
    assert best.plan is not None and best.plan.starts
    assert report.prescription.command == f"vllm serve {LLAMA} --max-model-len 21248"
    checked = plan(
        load_model(LLAMA),
        find_gpu("rtx4090"),
        VllmFlags(max_model_len=21248).validate(),
        vllm_version="0.10.1.1",
    )
    assert checked.starts and checked.kv.tokens >= 21000


def test_trimming_is_the_remedy_when_the_request_is_past_what_fits() -> None:
    log = _over_long_log(
        32768, 131000, port_line="INFO:     Uvicorn running on http://0.0.0.0:8001"
    )
    report = diagnose(log, gpu_hint="rtx4090")
    prescription = report.prescription
    assert prescription.best is None and prescription.command is None
    assert any("does not start on this GPU" in note for note in prescription.notes)
    assert len(prescription.remedies) == 1
    assert (
        "kvwise serve --upstream http://127.0.0.1:8001 --session-history"
        in (prescription.remedies[0])
    )


def test_a_request_past_the_model_s_own_limit_is_only_trimmed() -> None:
    report = diagnose(_over_long_log(32768, 140000), gpu_hint="h100")
    assert report.prescription.best is None
    assert any("beyond the model's own limit (131,072" in n for n in report.prescription.notes)


def test_preemption_fixes_start_and_the_gateway_admits_by_kv_tokens() -> None:
    report = diagnose(render(CASES["v1 stats, KV full"][1]()), gpu_hint="rtx4090")
    prescription = report.prescription
    assert report.diagnosis.kind == kinds.PREEMPTION
    assert prescription.best is not None and prescription.best.plan is not None
    before, after = prescription.before, prescription.best.plan
    assert before is not None and after.starts
    assert after.kv.tokens > before.kv.tokens  # a larger pool, in the planner's numbers
    alternatives = [option.changes for option in prescription.options[1:]]
    assert {"max_num_seqs": 7} in alternatives  # 8 ran when the KV cache filled up
    assert "admits requests by the KV tokens they need" in prescription.remedies[0]


@pytest.mark.parametrize("case", ["v1 engine dead", "v0 background loop died"])
def test_a_dead_engine_points_at_the_traceback_above(case: str) -> None:
    report = diagnose(render(CASES[case][1]()), gpu_hint="rtx4090")
    assert report.diagnosis.kind == kinds.ENGINE_DEAD
    assert report.prescription.best is None
    assert "first traceback above" in report.prescription.advice


def test_a_dead_engine_after_an_oom_is_the_oom() -> None:
    lines = CASES["v1 engine dead"][1]()
    oom = CASES["v1 OOM while serving"][1]()[-1]
    report = diagnose(render([*lines[:-1], oom, lines[-1]]))
    assert report.diagnosis.kind == kinds.CUDA_OOM_RUNTIME


def test_client_timeouts_get_advice_not_a_guessed_flag() -> None:
    report = diagnose(render(CASES["client timeouts"][1]()), gpu_hint="rtx4090")
    assert report.diagnosis.kind == kinds.REQUEST_TIMEOUT
    assert report.prescription.best is None
    assert "--max-num-seqs" in report.prescription.advice
    assert report.prescription.remedies


def test_v1_stats_with_the_preemption_count() -> None:
    # LoggingStatLogger.log (vllm/v1/metrics/loggers.py) adds "Preemptions: N" after the waiting
    # count when the interval had any
    lines = [
        "(APIServer pid=1) INFO 11-02 10:00:00 [loggers.py:123] Engine 000: Avg prompt "
        f"throughput: 0.0 tokens/s, Avg generation throughput: 200.1 tokens/s, Running: 12 reqs, "
        f"Waiting: 30 reqs, Preemptions: {n}, GPU KV cache usage: 99.6%, Prefix cache hit rate: "
        "40.2%"
        for n in (4, 9)
    ]
    report = diagnose("\n".join(lines).encode(), gpu_hint="rtx4090")
    assert report.diagnosis.kind == kinds.PREEMPTION
    assert "(13 preemptions logged)" in report.diagnosis.summary
    alternatives = [option.changes for option in report.prescription.options]
    assert {"max_num_seqs": 11} in alternatives  # 12 ran when the KV cache filled up
