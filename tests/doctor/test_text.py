"""Cleaning pasted logs: prefixes, colours, lost newlines, encodings, huge files."""

from __future__ import annotations

from kvwise.doctor import text
from kvwise.doctor.text import read_log


def _messages(data: bytes) -> list[str]:
    return [line.message for line in read_log(data).lines]


def test_prefixes_are_removed_and_the_header_is_kept_as_fields() -> None:
    data = (
        b"\x1b[32m(EngineCore_DP0 pid=123) INFO 12-13 19:54:18 [gpu_worker.py:243] "
        b"Available KV cache memory: 3.5 GiB\x1b[0m\n"
        b"vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory\n"
        b"2025-01-28T22:58:08.123456789Z (VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 "
        b"[multiproc_executor.py:470] RuntimeError: CUDA error: out of memory\n"
        b"[rank0]: ValueError: The model's max seq len (60000) is larger\n"
        b"(RayWorkerWrapper pid=1463574, ip=192.168.10.60) INFO 03-27 10:29:01 [worker.py:267] "
        b"Memory profiling takes 4.26 seconds [repeated 30x across cluster]\n"
        b"Jan 28 22:58:08 gpu-host vllm[1234]: WARN 01-28 22:58:08 scheduler.py:1057] preempted\n"
    )
    lines = read_log(data).lines
    assert [line.message for line in lines] == [
        "Available KV cache memory: 3.5 GiB",
        "ValueError: No available memory",
        "RuntimeError: CUDA error: out of memory",
        "ValueError: The model's max seq len (60000) is larger",
        "Memory profiling takes 4.26 seconds",
        "preempted",
    ]
    assert [(line.level, line.source) for line in lines[:2]] == [
        ("INFO", "gpu_worker.py"),
        ("ERROR", "engine.py"),
    ]
    assert lines[-1].level == "WARNING"


def test_lines_whose_newlines_were_lost_are_split_at_each_header() -> None:
    data = (
        b"INFO 08-29 02:02:10 [__init__.py:241] Automatically detected platform cuda. "
        b"(APIServer pid=28) INFO 08-29 02:02:14 [api_server.py:1805] vLLM API server version "
        b"0.10.1.1 (APIServer pid=28) INFO 08-29 02:02:14 [utils.py:326] non-default args: {}"
    )
    lines = read_log(data).lines
    assert [line.message for line in lines] == [
        "Automatically detected platform cuda.",
        "vLLM API server version 0.10.1.1",
        "non-default args: {}",
    ]
    assert {line.number for line in lines} == {1}  # still one physical line


def test_windows_encodings_and_progress_bar_carriage_returns() -> None:
    utf16 = "INFO 01-01 00:00:00 worker.py:1] Loading model weights took 14.2 GB\r\n".encode(
        "utf-16"
    )
    assert _messages(utf16) == ["Loading model weights took 14.2 GB"]
    bar = b"Loading safetensors checkpoint shards:  25%\rLoading safetensors checkpoint shards:  50%\n"
    assert _messages(bar)[-1] == "Loading safetensors checkpoint shards:  50%"


def test_binary_input_is_flagged_and_never_raises() -> None:
    log = read_log(bytes(range(256)) * 100)
    assert log.is_binary


def test_a_huge_log_is_read_as_head_and_tail_with_true_line_numbers() -> None:
    head = b"INFO 01-01 00:00:00 [utils.py:326] non-default args: {'max_model_len': 4096}\n"
    filler = b'INFO:     127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    preempted = (
        b"WARNING 01-01 00:00:00 scheduler.py:1] Sequence group 7 is preempted by "
        b"PreemptionMode.RECOMPUTE mode\n"
    )
    middle = (filler * 999 + preempted) * 200  # ~13 MB, beyond head + tail
    tail = b"ERROR 01-01 00:00:00 [core.py:1] the end\n"
    data = head + middle + tail
    log = read_log(data)
    assert log.is_truncated
    assert log.lines[0].message.startswith("non-default args")
    assert log.lines[-1].message == "the end"
    assert log.lines[-1].number == data.count(b"\n")
    assert (
        log.middle_count("preempted_v0")
        + sum("is preempted by" in line.message for line in log.lines)
        == 200
    )


def test_a_match_maps_back_to_its_line() -> None:
    log = text.build(text.split_lines("first\nsecond line\nthird"))
    offset = log.joined.index("line")
    assert log.line_at(offset).message == "second line"
