"""`kvwise doctor` on the real start-up logs in tests/data/validation (public logs with their sources).

Each failure record is fed as a user would paste it: its `excerpt` and its `error_text`.
The root cause must match the record's `failure_kind`, read through `dataset_kinds.DATASET_KINDS`
(the mapping is documented there): the dataset says `cuda_oom` where its collector did not
identify the stage, and the doctor names the stage when the log shows it, so a `cuda_oom`
record is right for any out-of-memory kind whose evidence holds the OOM line (checked below).
Bar (issue 5): at least 85 % right, none crash.

The records also carry the figures the collector transcribed (weights, KV GiB, blocks, tokens,
concurrency...): wherever such a number appears in the excerpt, the parser must read it.
"""

from __future__ import annotations

import math
import re

from kvwise.doctor import kinds
from kvwise.doctor.diagnose import diagnose
from kvwise.doctor.parse import parse_log
from kvwise.doctor.text import read_log
from tests.doctor.dataset_kinds import DATASET_KINDS
from tests.doctor.records import load, pasted

ACCURACY_BAR = 0.85

# record field -> parsed figure (sizes in GiB in the record, bytes in the parser)
FIGURE_FIELDS = {
    "weights_gib": "weights_bytes",
    "activation_peak_gib": "activation_peak_bytes",
    "non_torch_gib": "non_torch_bytes",
    "cuda_graph_gib": "cuda_graph_bytes",
    "kv_cache_gib": "kv_cache_bytes",
    "num_gpu_blocks": "num_gpu_blocks",
    "kv_cache_tokens": "kv_cache_tokens",
    "max_concurrency": "max_concurrency",
    "gpu_total_gib": "total_bytes",
}


def test_failure_cases_are_named_right(fidelity_report: list[str]) -> None:
    failures = [r for r in load() if r["outcome"] == "failure"]
    assert failures
    right, misses = 0, []
    for record in failures:
        report = diagnose(pasted(record))  # must not raise
        accepted = DATASET_KINDS.get(record["failure_kind"], frozenset({record["failure_kind"]}))
        if report.diagnosis.kind in accepted and report.diagnosis.evidence:
            right += 1
        else:
            misses.append(f"{record['id']}: {record['failure_kind']} -> {report.diagnosis.kind}")
    accuracy = right / len(failures)
    fidelity_report.append(
        f"doctor root cause on logged failures: {right}/{len(failures)} right ({accuracy:.0%})"
    )
    fidelity_report.extend(f"  doctor miss: {miss}" for miss in misses)
    assert accuracy >= ACCURACY_BAR, misses


def test_an_oom_case_names_its_stage_only_with_evidence() -> None:
    for record in load():
        if record["failure_kind"] != "cuda_oom":
            continue
        diagnosis = diagnose(pasted(record)).diagnosis
        quoted = " ".join(line.message for line in diagnosis.evidence)
        assert "out of memory" in quoted.lower() or "OutOfMemoryError" in quoted
        if diagnosis.kind != kinds.CUDA_OOM:
            assert len(diagnosis.evidence) >= 2  # the OOM line and the line that places it


def test_every_record_is_read_without_error_and_healthy_ones_are_not_failures() -> None:
    startup_failures = {
        kinds.MAX_MODEL_LEN_EXCEEDS_KV_CACHE,
        kinds.NO_KV_CACHE_MEMORY,
        kinds.INSUFFICIENT_FREE_MEMORY,
        kinds.CUDA_OOM_SAMPLER_WARMUP,
    }
    for record in load():
        kind = diagnose(pasted(record)).diagnosis.kind
        if record["outcome"] == "ok":
            assert kind not in startup_failures, record["id"]


def _appears(value: float, text: str) -> bool:
    """The record's number is written in the excerpt (with or without thousands separators)."""
    forms = {f"{value:g}", f"{value:,.0f}" if float(value).is_integer() else f"{value:g}"}
    return any(re.search(rf"(?<![\d.]){re.escape(form)}(?![\d])", text) for form in forms)


def test_figures_in_the_excerpts_are_read(fidelity_report: list[str]) -> None:
    read, missed = 0, []
    for record in load():
        parsed = parse_log(read_log(pasted(record)))
        for field, figure in FIGURE_FIELDS.items():
            value = record.get(field)
            if value is None or not _appears(value, record["excerpt"] or ""):
                continue
            scale = 2**30 if figure.endswith("_bytes") else 1
            found = [o.value / scale for o in parsed.figures.get(figure, ())]
            if any(math.isclose(v, value, rel_tol=0.002, abs_tol=0.006) for v in found):
                read += 1
            else:
                missed.append(f"{record['id']} {field}={value}")
    total = read + len(missed)
    fidelity_report.append(f"doctor figures read from the excerpts: {read}/{total}")
    fidelity_report.extend(f"  not read (prose, not a log line): {m}" for m in missed)
    assert read / total >= 0.95, missed
