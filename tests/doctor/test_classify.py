"""Every root cause, in V0 and V1 wordings, pasted in every way users paste logs.

The synthetic logs (`logs.py`) are written from the formats of real vLLM logs; each case is
rendered bare, with V0 and V1 headers, Docker and Kubernetes prefixes, ANSI colours, `[rank0]:`,
CRLF and with every newline lost, and must be named the same way each time.
"""

from __future__ import annotations

import pytest

from kvwise.doctor import kinds
from kvwise.doctor.classify import classify
from kvwise.doctor.parse import parse_log
from kvwise.doctor.text import read_log
from tests.doctor.cases import CASES, CORE, ENGINE, NEW_MAX_LEN, v1_oom
from tests.doctor.logs import (
    STYLES,
    collapsed,
    error,
    info,
    render,
    traceback,
    v0_frames,
    v1_kv,
    v1_start,
)


def _kind(data: bytes) -> str:
    return classify(parse_log(read_log(data))).kind


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_cause_is_named_in_every_paste_style(case: str, style: str) -> None:
    expected, lines = CASES[case]
    assert _kind(render(lines(), style)) == expected


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_cause_survives_lost_newlines_and_crlf(case: str) -> None:
    expected, lines = CASES[case]
    assert _kind(collapsed(lines())) == expected
    assert _kind(render(lines(), "v0_header", newline="\r\n")) == expected


def test_every_kind_of_the_vocabulary_has_a_case() -> None:
    covered = {kind for kind, _ in CASES.values()}
    assert covered == set(kinds.ALL_KINDS) - {kinds.CUDA_OOM}


@pytest.mark.parametrize(
    "text",
    [
        "我用vllm部署Qwen2.5-7B，并发一高就OOM，怎么办？",
        "It OOMs as soon as I set --max_num_batched_tokens above 64000.",
        "vllm serve keeps crashing, oom every time with 8 requests",
        "The server runs out of VRAM after a few minutes.",
        "24G跑7B还是显存不够",
    ],
)
def test_a_bare_mention_of_oom_is_an_unplaced_cuda_oom(text: str) -> None:
    assert _kind(text.encode()) == kinds.CUDA_OOM


@pytest.mark.parametrize("text", ["Zoom into the room.", "oom-kill invoked", "an OOMKilled pod"])
def test_words_that_contain_oom_are_not_a_mention(text: str) -> None:
    assert _kind(text.encode()) != kinds.CUDA_OOM


def test_evidence_quotes_the_error_line_and_the_figures_behind_it() -> None:
    lines = v1_start(max_model_len=100000) + v1_kv()[:2] + [error(CORE, NEW_MAX_LEN)]
    diagnosis = classify(parse_log(read_log(render(lines))))
    quoted = [line.message for line in diagnosis.evidence]
    assert any(q.startswith("ValueError: To serve at least one request") for q in quoted)
    assert "Available KV cache memory: 4.71 GiB" in quoted
    assert "88,176" in diagnosis.summary and "100,000" in diagnosis.summary


def test_the_oom_stage_line_is_quoted() -> None:
    lines = v1_start() + v1_oom("determine_available_memory", "profile_run", "_dummy_run")
    diagnosis = classify(parse_log(read_log(render(lines))))
    assert diagnosis.stage == "profile_run"
    assert any("in profile_run" in line.message for line in diagnosis.evidence)
    assert any(line.message.startswith("torch.OutOfMemoryError") for line in diagnosis.evidence)


def test_the_failed_attempt_is_read_not_a_later_one() -> None:
    failed = [*v1_start(max_model_len=100000), error(CORE, NEW_MAX_LEN)]
    later = [
        info(
            "utils.py:326",
            "non-default args: {'model': 'Qwen/Qwen2.5-7B-Instruct', 'max_model_len': 8192}",
        )
    ]
    parsed = parse_log(read_log(render(failed + later)))
    diagnosis = classify(parsed)
    assert parsed.flags(diagnosis.anchor)["max_model_len"] == 100000


def test_interleaved_processes_are_ordered_by_vllm_s_timestamps() -> None:
    # Ray workers print out of order: the capture line (10:29:03) is pasted before the
    # profiling lines (10:29:01), yet capture is the stage the OOM (10:29:13) happened in.
    text = (
        b"(RayWorkerWrapper pid=18) INFO 03-27 10:29:03 [model_runner.py:1442] Capturing "
        b"cudagraphs for decoding.\n"
        b"(RayWorkerWrapper pid=14, ip=10.0.0.6) INFO 03-27 10:29:01 [worker.py:267] the rest "
        b"of the memory reserved for KV Cache is 21.20GiB.\n"
        b"(RayWorkerWrapper pid=20, ip=10.0.0.2) ERROR 03-27 10:29:13 [worker_base.py:620] "
        b"Error executing method 'start_worker_execution_loop'.\n"
        b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB.\n"
    )
    assert _kind(text) == kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE
    # stamped earlier than the KV line, the capture line is no longer the last stage reached
    assert _kind(text.replace(b"10:29:03", b"10:28:59")) == kinds.CUDA_OOM_KV_CACHE_ALLOCATION


def test_the_engine_shows_in_traceback_paths() -> None:
    lines = v1_oom("determine_available_memory", "profile_run")
    parsed = parse_log(read_log(render(lines, "rank")))
    assert parsed.engine == "V1"
    frames = traceback(ENGINE, v0_frames("determine_num_available_blocks", "profile_run"), "x")
    assert parse_log(read_log(render(frames, "bare"))).engine == "V0"
