"""Every out-of-memory error is placed at its start-up stage, on tracebacks shaped as the public
vLLM issues show them (`issue_logs.py` cites each): weights, profile run, KV-cache allocation,
CUDA-graph capture, sampler warm-up."""

from __future__ import annotations

import pytest

from kvwise.doctor.diagnose import diagnose
from tests.doctor.issue_logs import ISSUE_LOGS, IssueLog


@pytest.mark.parametrize(
    "issue",
    ISSUE_LOGS,
    ids=[i.url.rsplit("/", 3)[-3] + i.url.rsplit("/", 1)[-1] for i in ISSUE_LOGS],
)
def test_the_stage_of_each_oom_is_named(issue: IssueLog) -> None:
    report = diagnose(issue.text.encode())
    assert report.diagnosis.kind == issue.kind
    assert report.diagnosis.stage == issue.stage
    assert report.to_json()["parsed"]["stage"] == issue.stage
    quoted = " ".join(line.message for line in report.diagnosis.evidence)
    assert "out of memory" in quoted.lower()


def test_every_start_up_stage_has_a_public_traceback() -> None:
    stages = {issue.stage for issue in ISSUE_LOGS}
    assert stages == {
        "weights",
        "profile_run",
        "kv_cache_allocation",
        "cuda_graph_capture",
        "sampler_warmup",
    }
