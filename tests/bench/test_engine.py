"""kvwise bench and calibrate against the real vLLM CPU engine (tests/engine_fixture.py).

Kept short for CI on two cores: a few sessions, a few turns, 16-24 output tokens.
"""

from __future__ import annotations

import itertools
import random
import re
import xml.dom.minidom
from pathlib import Path

import httpx
import pytest

from kvwise.bench.predict import deployed, predict, relative_errors
from kvwise.bench.prompts import ServerTokenizer, exact_text
from kvwise.bench.results import BenchResults, read_results
from kvwise.cli import main
from kvwise.core.catalog import load_model
from kvwise.core.gpus import find_gpu
from kvwise.sim.coefficients import coefficients_for
from kvwise.sim.workloads import WorkloadSpec
from tests.bench.simulated import TINY_CONFIG, TINY_FLAGS
from tests.engine_fixture import EngineProcess

pytestmark = pytest.mark.engine

# the engine's configuration, told to bench as vLLM flags (the planner needs them to predict)
ENGINE_FLAGS = [
    "--dtype", "float32", "--max-model-len", "2048", "--max-num-seqs", "128",
    "--max-num-batched-tokens", "2048", "--enforce-eager", "--kv-cache-memory-bytes", "256M",
]  # fmt: skip


def _bench(engine: EngineProcess, out: Path, *args: str) -> BenchResults:
    code = main(
        ["bench", engine.url, "--workload", "agent", "--no-progress", "--out", str(out), *args]
    )
    assert code == 0
    return read_results(out)


def test_agent_sessions_send_their_growing_history(
    vllm_engine: EngineProcess, tmp_path: Path
) -> None:
    html = tmp_path / "report.html"
    results = _bench(
        vllm_engine,
        tmp_path / "results.json",
        *(
            "--sessions",
            "3",
            "--turns",
            "3",
            "--system-prompt",
            "100",
            "--user-tokens",
            "20",
        ),
        *("--tool-output", "30", "--output-len", "16", "--think-time-s", "0.05"),
        *("--max-concurrency", "1,3", "--html", str(html)),
    )
    assert results.server.backend == "vllm" and results.tokenizer.startswith("tokenizer.json")
    for run in results.runs:
        assert (run.metrics["completed"], run.metrics["failed"]) == (9, 0)
        assert all(r.output_tokens == 16 for r in run.requests)  # usage, exactly max_tokens
        assert run.metrics["total_output_tokens"] == 144
        # the server counted the same tokens
        assert run.server_metrics is not None
        assert run.server_metrics["generation_tokens"] == 144
        assert run.server_metrics["prompt_tokens"] == run.metrics["total_input_tokens"]
        by_session: dict[int, list[int]] = {}
        for r in sorted(run.requests, key=lambda r: (r.session, r.turn)):
            by_session.setdefault(r.session, []).append(r.prompt_tokens or 0)
        first_turns = {tokens[0] for tokens in by_session.values()}
        assert len(first_turns) == 1 and first_turns.pop() > 120  # 100 + 20 + the chat template
        for tokens in by_session.values():
            # each turn resends the last prompt, its answer (16) and 50 new tokens
            assert all(b - a >= 50 + 16 for a, b in itertools.pairwise(tokens))
    page = html.read_text()
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    assert len(svgs) == 4 and "TTFT distribution" in page
    for svg in svgs:
        xml.dom.minidom.parseString(svg)  # well-formed, inline
    assert "<script" not in page and "src=" not in page  # nothing to fetch: works offline


def test_server_errors_mid_run_are_counted_and_the_run_goes_on(
    vllm_engine: EngineProcess, tmp_path: Path
) -> None:
    # the third turn's prompt passes max_model_len (2048): vLLM answers 400 for it, mid-run
    results = _bench(
        vllm_engine,
        tmp_path / "results.json",
        *(
            "--sessions",
            "2",
            "--turns",
            "4",
            "--system-prompt",
            "600",
            "--user-tokens",
            "10",
        ),
        *("--tool-output", "700", "--output-len", "8", "--think-time-s", "0"),
    )
    (run,) = results.runs
    assert run.metrics["completed"] == 4 and run.metrics["failed"] == 2
    failed = [r for r in run.requests if r.error]
    assert {r.turn for r in failed} == {2}  # and no fourth turn was sent after the failure
    assert len(run.requests) == 6
    assert all(r.error and r.error.startswith("HTTP 400") for r in failed)


# One rerun: the held-out run is 12 requests on a 2-core machine that also runs the load generator,
# and when the engine is starved it streams answers in bursts; in 1 of 5 full runs on 2026-12-02
# (7 of 12 answers in bursts) the shipped coefficients came out closer by chance. A calibration
# that is worse every time still fails.
@pytest.mark.flaky(reruns=1)
def test_calibrated_simulation_is_closer_to_the_cpu_engine(
    vllm_engine: EngineProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fidelity_report: list[str],
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    workload = [
        *(
            "--sessions",
            "4",
            "--turns",
            "3",
            "--system-prompt",
            "200",
            "--user-tokens",
            "30",
        ),
        *("--tool-output", "60", "--output-len", "24", "--think-time-s", "0.1"),
        *("--gpu", "rtx4090", "--sim-model", TINY_CONFIG, *ENGINE_FLAGS),
    ]
    fit_on = _bench(vllm_engine, tmp_path / "fit.json", *workload, "--max-concurrency", "1,4")
    held_out = _bench(vllm_engine, tmp_path / "check.json", *workload, "--max-concurrency", "2")
    assert main(["calibrate", str(tmp_path / "fit.json")]) == 0

    model, gpu = load_model(TINY_CONFIG), find_gpu("rtx4090")
    spec = WorkloadSpec(**held_out.workload)
    (run,) = held_out.runs
    shipped = deployed(model, gpu, TINY_FLAGS, held_out.server, coefficients=coefficients_for(gpu))
    calibrated = deployed(model, gpu, TINY_FLAGS, held_out.server)
    assert calibrated.coefficients_source.startswith("calibrated")
    # all four figures a user reads: since the shipped RTX 4090 set was refitted (GPU families,
    # 2026-12-02) its fixed per-step costs happen to land within 6 % of this tiny model's E2E and
    # throughput on the CPU engine while its TTFT and TPOT are 80-115 % off, so E2E and
    # throughput alone no longer tell a calibration from a coincidence
    judged = ("mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "output_throughput")
    shown = judged
    errors = {}
    for name, replica in (("shipped", shipped), ("calibrated", calibrated)):
        predicted = predict(replica, spec, run.max_concurrency, held_out.seed)
        found = relative_errors(run.metrics, predicted)
        errors[name] = sum(abs(found[key]) for key in judged)
        fidelity_report.append(
            f"bench/calibrate on the CPU engine, held-out c=2, {name} coefficients: "
            + ", ".join(f"{key} {found[key]:+.0%}" for key in shown)
            + f" ({run.metrics['num_burst_streamed']} of 12 answers streamed in one burst)"
        )
    assert errors["calibrated"] < errors["shipped"]
    assert fit_on.runs[0].metrics["completed"] == 12


def test_without_a_tokenizer_file_the_servers_tokenize_counts_exactly(
    vllm_engine: EngineProcess,
) -> None:
    with httpx.Client(timeout=30.0) as client:
        counter = ServerTokenizer(client, vllm_engine.url, "tiny")
        text, count = exact_text(counter, random.Random(0), 57)
        assert count == 57 and len(counter.encode(text)) == 57


def test_the_default_agent_workload_is_fitted_to_the_engines_context(
    vllm_engine: EngineProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The defaults (2,000-token system prompt, 30 turns) outgrow the engine's 2,048 tokens:
    bench scales them to fit and says so, and every request is served."""
    results = _bench(
        vllm_engine, tmp_path / "results.json", "--sessions", "2", "--think-time-s", "0"
    )
    assert "scaled to fit" in capsys.readouterr().err
    (run,) = results.runs
    assert run.metrics["failed"] == 0 and run.metrics["completed"] == len(run.requests) >= 8
    assert results.server.max_model_len == 2048
