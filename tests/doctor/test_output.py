"""What `kvwise doctor` prints, for every log of the corpus: never a placeholder, always the model.

Every case of `cases.py` (in two paste styles), every record of the validation set and every
traceback of `issue_logs.py` is
diagnosed with and without `--model`/`--gpu`, rendered as the terminal shows it and as JSON, and
the prose is scanned for what a placeholder looks like: a lone `?`, `None`, `nan`, `<MODEL>`.
The lines the doctor quotes from the log as evidence are the log's own text and are not scanned.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console

from kvwise.doctor.diagnose import Report, diagnose
from kvwise.doctor.render import render as show
from tests.doctor.cases import CASES
from tests.doctor.issue_logs import ISSUE_LOGS
from tests.doctor.logs import MODEL, render
from tests.doctor.records import load, pasted

PLACEHOLDER = re.compile(
    r"(?<![\w/<\[])\?(?![\w=])"  # a lone `?` standing for a missing value
    r"|\bNone\b|\bnan\b|\binf\b"  # Python's rendering of a missing or broken number
    r"|<[A-Z][A-Z_ ]*>"  # `<MODEL>`, `<GPU>`
)
HINTS: tuple[dict[str, str], ...] = ({}, {"model_hint": MODEL, "gpu_hint": "rtx4090"})


def _corpus() -> Iterator[tuple[str, bytes]]:
    for name, (_, lines) in sorted(CASES.items()):
        yield f"{name} (v1 headers)", render(lines(), "v1_header")
        yield f"{name} (bare)", render(lines(), "bare")
    for record in load():
        yield record["id"], pasted(record)
    for issue in ISSUE_LOGS:
        yield issue.url, issue.text.encode()


CORPUS = dict(_corpus())


def _terminal_text(report: Report) -> str:
    buffer = io.StringIO()
    show(report, Console(file=buffer, width=1000, color_system=None))
    quoted = {line.quote() for line in report.diagnosis.evidence}
    # the panel's borders and the quoted log lines are not the doctor's prose
    kept = [
        line.strip(" │╭╮╰╯─")
        for line in buffer.getvalue().splitlines()
        if not any(q in line for q in quoted)
    ]
    return "\n".join(kept)


def _json_prose(data: dict[str, Any]) -> list[str]:
    fix = data["fix"] or {}
    texts = [data["summary"], *data["parsed"]["notes"]]
    texts += [fix.get("command") or "", fix.get("reason") or "", *fix.get("notes", [])]
    texts += [alternative["reason"] for alternative in fix.get("alternatives", [])]
    return texts


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_no_placeholder_is_ever_printed(name: str) -> None:
    for hints in HINTS:
        report = diagnose(CORPUS[name], **hints)
        for text in [_terminal_text(report), *_json_prose(report.to_json())]:
            found = PLACEHOLDER.search(text)
            assert found is None, f"{found.group(0)!r} in: {text[max(0, found.start() - 80) :]}"
        json.dumps(report.to_json(), allow_nan=False)  # no NaN/inf in the JSON either


def test_the_command_names_the_model_given_with_dash_dash_model() -> None:
    record = next(r for r in load() if r["id"] == "qwen-16-qwen15-7b-gptq-rtx3090-fail")
    model = "Qwen/Qwen1.5-7B-Chat-GPTQ-Int4"  # the log spells it qwen/...; the user's spelling wins
    report = diagnose(pasted(record), gpu_hint="rtx3090", model_hint=model)
    assert report.prescription is not None and report.prescription.command is not None
    assert report.prescription.command.startswith(f"vllm serve {model} ")


def test_the_command_names_the_model_the_log_gave_as_dash_dash_model() -> None:
    log = (
        "python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-7B-Instruct "
        "--max-model-len 32768 --gpu-memory-utilization 0.9\n"
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine."
    )
    report = diagnose(log.encode(), gpu_hint="rtx4090")
    assert report.prescription is not None
    assert report.prescription.command is not None
    assert report.prescription.command.startswith("vllm serve Qwen/Qwen2.5-7B-Instruct ")


def test_without_a_model_only_the_change_is_printed() -> None:
    log = (
        "ValueError: To serve at least one request with the model's max seq len (32768), (1.75 "
        "GiB KV cache is needed, which is larger than the available KV cache memory (1.60 GiB). "
        "Based on the available memory, the estimated maximum model length is 29952."
    )
    report = diagnose(log.encode())
    assert report.prescription is not None and report.prescription.command is None
    text = _terminal_text(report)
    assert "add to the vllm serve command you ran:" in text
    assert "--max-model-len 29952" in text
