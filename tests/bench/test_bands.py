"""`kvwise bench --predict`: for each banded figure, whether the measurement fell inside the
prediction's out-of-sample band (the prediction is a real simulation; the measurements are set
around it, which is what the band judges)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from kvwise.bench.predict import deployed, judge_bands, predict
from kvwise.bench.report import terminal_report
from kvwise.bench.results import BenchResults, RunResult, ServerInfo
from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.sim.workloads import WorkloadSpec

SPEC = WorkloadSpec("random", num_prompts=8, input_len=300, output_len=32)
SERVER = ServerInfo(url="http://127.0.0.1:8000/v1", model="qwen")
METRICS = ("output_throughput", "mean_tpot_ms", "median_ttft_ms")


def _prediction() -> dict:
    replica = deployed(
        load_model("Qwen/Qwen2.5-7B-Instruct"),
        find_gpu("rtx4090"),
        VllmFlags(max_model_len=4096),
        SERVER,
    )
    return predict(replica, SPEC, 1, 0)


def _measured_at(prediction: dict, error: dict[str, float]) -> dict:
    """Measurements the prediction misses by `error`: predicted = measured * (1 + error)."""
    return {m: prediction[m] / (1 + error[m]) for m in METRICS}


def _report(measured: dict, prediction: dict) -> str:
    run = RunResult(max_concurrency=1, request_rate=None, metrics=measured,
                    prediction=prediction, requests=[])  # fmt: skip
    results = BenchResults(date="2026-12-02", kvwise_version="0", server=SERVER,
                           workload={}, seed=0, tokenizer="x", runs=[run])  # fmt: skip
    out = io.StringIO()
    terminal_report(results, Console(file=out, width=200))
    return " ".join(out.getvalue().split())


def test_a_measurement_outside_its_band_is_called_out() -> None:
    prediction = _prediction()
    bands = prediction["bands"]
    assert {b["regime"] for b in bands.values()} == {"low"}  # one request at a time
    # each figure missed by twice its band's upper error: outside
    far = {m: 2 * bands[m]["p90_relative_error"] + 0.5 for m in METRICS}
    judged = judge_bands(_measured_at(prediction, far), prediction)
    for metric in METRICS:
        assert judged["bands"][metric]["measured_inside"] is False
        assert judged["bands"][metric]["measured_relative_error"] == pytest.approx(far[metric])
    text = _report(_measured_at(prediction, far), judged)
    assert text.count("OUTSIDE the band") == 3
    assert "80% of out-of-sample cases within" in text


def test_a_measurement_at_the_bands_median_is_inside() -> None:
    prediction = _prediction()
    mid = {m: prediction["bands"][m]["median_relative_error"] for m in METRICS}
    judged = judge_bands(_measured_at(prediction, mid), prediction)
    assert all(judged["bands"][m]["measured_inside"] for m in METRICS)
    assert _report(_measured_at(prediction, mid), judged).count("inside the band") == 3
