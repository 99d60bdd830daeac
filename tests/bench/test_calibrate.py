"""Calibration recovers a known step-time model from measurements it generated, stores it for
the user's GPU and model, and the simulator then uses it and says so."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kvwise.bench.calibrate import CalibrationRun, fit
from kvwise.bench.measured import measured_run
from kvwise.bench.predict import deployed
from kvwise.bench.results import BenchResults, RunResult, ServerInfo, write_results
from kvwise.bench.summary import summarize
from kvwise.cli import main
from kvwise.core.calibration import Calibration, calibration_path, save_calibration
from kvwise.core.catalog import load_model
from kvwise.core.gpus import find_gpu
from kvwise.errors import DataError
from kvwise.sim.steptime import StepTimeCoefficients
from kvwise.sim.workloads import WorkloadSpec
from tests.bench.simulated import (
    TINY_CACHE_CONFIG,
    TINY_CONFIG,
    TINY_FLAGS,
    simulated_records,
    tiny_config,
)

PRIOR = StepTimeCoefficients()
# a CPU-like engine: milliseconds per step and per request in it, slow GEMMs and attention,
# a long API hop
TRUTH = replace(
    PRIOR,
    step_overhead_s=5e-3,
    gemm_compute=1000.0,
    attention_compute=2000.0,
    kv_read=300.0,
    request_overhead_s=1e-3,
    api_overhead_s=0.02,
)
# coefficient -> relative tolerance. Per step, per request and per TTFT the data pin them
# down; the two prefill terms trade off against each other (GEMM past the ridge and attention
# both grow with the first turn's prompt), so they come out within 10 %
FITTED = {
    "step_overhead_s": 0.03,
    "request_overhead_s": 0.03,
    "api_overhead_s": 0.03,
    "kv_read": 0.05,
    "gemm_compute": 0.1,
    "attention_compute": 0.1,
}


def agent_spec(max_concurrency: int) -> WorkloadSpec:
    return WorkloadSpec(
        kind="agent",
        sessions=4,
        turns=4,
        system_prompt_tokens=800,  # first turns prefill past the roofline ridge (GEMM time)
        user_tokens=40,
        tool_output_tokens=100,
        output_len=24,
        think_time_s=0.2,
        max_concurrency=max_concurrency,
    )


def test_fit_recovers_the_coefficients_that_made_the_measurements() -> None:
    runs = [
        CalibrationRun(measured_run(simulated_records(agent_spec(c), TRUTH)), tiny_config(PRIOR))
        for c in (1, 2, 4)
    ]
    result = fit(runs, PRIOR)
    for name, tolerance in FITTED.items():
        assert getattr(result.coefficients, name) == pytest.approx(
            getattr(TRUTH, name), rel=tolerance
        ), name
    assert result.error_before["tpot"] > 0.5  # GPU defaults on a CPU-like engine
    assert max(result.error_after.values()) < 0.01


def _results_file(path: Path) -> Path:
    runs = []
    for c in (1, 4):
        records = simulated_records(agent_spec(c), TRUTH)
        runs.append(
            RunResult(
                max_concurrency=c, request_rate=None, metrics=summarize(records), requests=records
            )
        )
    server = ServerInfo(
        url="http://127.0.0.1:1",
        model="tiny",
        backend="vllm",
        flags=TINY_FLAGS.set_values(),
        cache_config=TINY_CACHE_CONFIG,
    )
    results = BenchResults(
        date="2026-11-30T10:00:00+00:00",
        kvwise_version="test",
        server=server,
        workload={"kind": "agent"},
        seed=0,
        tokenizer="simulated",
        runs=runs,
    )
    write_results(results, path)
    return path


def test_calibrate_stores_the_fit_and_the_simulator_uses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    model, gpu = load_model(TINY_CONFIG), find_gpu("rtx4090")
    server = ServerInfo(url="", model="tiny", cache_config=TINY_CACHE_CONFIG)
    assert "not calibrated" in deployed(model, gpu, TINY_FLAGS, server).coefficients_source

    results = _results_file(tmp_path / "results.json")
    argv = ["calibrate", str(results), "--gpu", "rtx4090", "--model", TINY_CONFIG, "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fit_error_before"]["ttft"] > 0.5 > 0.01 > report["fit_error_after"]["ttft"]
    stored = json.loads((tmp_path / "config" / "kvwise" / "calibration.json").read_text())
    entry = stored["entries"][0]
    assert (entry["gpu"], entry["model"]) == ("RTX 4090", "tiny-qwen2")
    assert entry["coefficients"]["step_overhead_s"] == pytest.approx(
        TRUTH.step_overhead_s, rel=0.03
    )

    replica = deployed(model, gpu, TINY_FLAGS, server)
    assert replica.coefficients_source.startswith("calibrated")
    assert replica.config.coefficients.api_overhead_s == pytest.approx(0.02, rel=0.03)


def test_calibrate_without_gpu_or_model_says_which_flag_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _results_file(tmp_path / "results.json")
    assert main(["calibrate", str(results), "--model", TINY_CONFIG]) == 2
    assert "pass --gpu" in capsys.readouterr().err


BLOCK_CALIBRATE_EXTRA = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"scipy"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
from kvwise.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_without_the_calibrate_extra_one_line_says_what_to_install(tmp_path: Path) -> None:
    """As after a plain `pip install -e .`: scipy cannot be imported."""
    results = _results_file(tmp_path / "results.json")
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_CALIBRATE_EXTRA, "calibrate", str(results)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'kvwise[calibrate]'" in lines[0], done.stderr


def test_calibrate_rejects_a_file_that_is_not_bench_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.json"
    path.write_text('{"model": "x"}')
    assert main(["calibrate", str(path), "--gpu", "rtx4090", "--model", TINY_CONFIG]) == 2
    assert "not a kvwise bench results file" in capsys.readouterr().err


def test_an_entry_fitted_for_another_step_time_model_asks_for_a_new_calibration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    save_calibration(
        Calibration(
            gpu="RTX 4090",
            model="tiny-qwen2",
            coefficients={"prefill_compute": 2.0},  # a term the step-time model no longer has
            fitted_at="2026-11-30T10:00:00+00:00",
            path=calibration_path(),
        )
    )
    server = ServerInfo(url="", model="tiny", cache_config=TINY_CACHE_CONFIG)
    with pytest.raises(DataError, match="run kvwise calibrate again"):
        deployed(load_model(TINY_CONFIG), find_gpu("rtx4090"), TINY_FLAGS, server)


def test_calibrate_takes_the_api_servers_cpu_per_token_from_its_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server's own CPU seconds (/metrics process_cpu_seconds_total, read by bench around
    each run) over the tokens it generated: the busiest run's figure, which then caps the
    simulated tokens/s."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    path = _results_file(tmp_path / "results.json")
    body = json.loads(path.read_text())
    # light load: 1.2 ms a token (one chunk each); busier: 0.5 ms (streams merged into chunks)
    for run, (cpu_s, tokens) in zip(body["runs"], ((6.0, 5000.0), (4.0, 8000.0)), strict=True):
        run["server_metrics"] = {"api_server_cpu_s": cpu_s, "generation_tokens": tokens}
    path.write_text(json.dumps(body))
    argv = ["calibrate", str(path), "--gpu", "rtx4090", "--model", TINY_CONFIG, "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["coefficients_after"]["frontend_token_s"] == pytest.approx(0.5e-3)
    server = ServerInfo(url="", model="tiny", cache_config=TINY_CACHE_CONFIG)
    replica = deployed(load_model(TINY_CONFIG), find_gpu("rtx4090"), TINY_FLAGS, server)
    assert replica.config.coefficients.frontend_token_s == pytest.approx(0.5e-3)


def test_without_the_servers_cpu_figure_calibrate_keeps_the_shipped_per_token_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    path = _results_file(tmp_path / "results.json")
    argv = ["calibrate", str(path), "--gpu", "rtx4090", "--model", TINY_CONFIG, "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    after, before = report["coefficients_after"], report["coefficients_before"]
    assert after["frontend_token_s"] == before["frontend_token_s"] > 0
