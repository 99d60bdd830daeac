"""Fitting: the linear forms reproduce the simulation, and the fit recovers known coefficients."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.sim.deploy import deployment
from kvwise.sim.runner import simulate
from kvwise.sim.steptime import StepTimeCoefficients
from kvwise.sim.workloads import WorkloadSpec
from tests.sim.fit import blend, fit_coefficients, targets

FIGURES = ("mean_tpot_ms", "median_ttft_ms", "mean_ttft_ms", "mean_e2el_ms", "output_throughput")


def _runs(coefficients: StepTimeCoefficients):  # type: ignore[no-untyped-def]
    model, gpu = load_model("Qwen/Qwen2.5-7B-Instruct"), find_gpu("rtx4090")
    config = replace(
        deployment(model, gpu, VllmFlags(max_model_len=8192)).config, coefficients=coefficients
    )
    # the last: all at once, so that requests queue for the API server's CPU
    for rate, input_len in ((1.0, 200), (8.0, 600), (20.0, 300), (None, 300)):
        spec = WorkloadSpec(
            "sharegpt", num_prompts=150, request_rate=rate, input_len=input_len, output_len=180
        )
        yield simulate(config, spec, seed=1, record_steps=True)


def test_targets_reproduce_the_simulated_figures_exactly() -> None:
    coefficients = StepTimeCoefficients(frontend_request_s=2e-3)
    for result in _runs(coefficients):
        m = result.metrics
        rows = {
            t.name: t.predicted(coefficients)
            for t in targets(result, dict.fromkeys(FIGURES, 1.0), coefficients)
        }
        assert rows["mean_tpot_ms"] == pytest.approx(m["mean_tpot_ms"] / 1000, rel=1e-9)
        assert rows["median_ttft_ms"] == pytest.approx(m["median_ttft_ms"] / 1000, rel=1e-9)
        assert rows["mean_ttft_ms"] == pytest.approx(m["mean_ttft_ms"] / 1000, rel=1e-9)
        assert rows["mean_e2el_ms"] == pytest.approx(m["mean_e2el_ms"] / 1000, rel=1e-9)
        assert rows["duration_s"] == pytest.approx(m["duration"], rel=1e-9)


def test_the_fit_recovers_the_figures_of_known_coefficients() -> None:
    truth = StepTimeCoefficients(
        weight_read=1.3,
        kv_read=1.8,
        gemm_compute=1.5,
        step_overhead_s=4e-3,
        api_overhead_s=15e-3,
        frontend_request_s=3e-3,
    )
    measured = [{k: r.metrics[k] for k in FIGURES} for r in _runs(truth)]
    guess = StepTimeCoefficients()
    before = [
        abs(r.metrics[f] / m[f] - 1)
        for r, m in zip(_runs(guess), measured, strict=False)
        for f in FIGURES
    ]
    assert max(before) > 0.15  # the prior alone is far off: there is something to recover
    for _ in range(5):  # simulate with the current guess, fit, move halfway (as the fit script)
        rows = [
            t for r, m in zip(_runs(guess), measured, strict=False) for t in targets(r, m, guess)
        ]
        guess = blend(guess, fit_coefficients(rows, StepTimeCoefficients(), ridge=0.01))
    for result, m in zip(_runs(guess), measured, strict=False):
        assert result.metrics["mean_tpot_ms"] == pytest.approx(m["mean_tpot_ms"], rel=0.05)
        assert result.metrics["output_throughput"] == pytest.approx(
            m["output_throughput"], rel=0.05
        )
        assert result.metrics["median_ttft_ms"] == pytest.approx(m["median_ttft_ms"], rel=0.10)
