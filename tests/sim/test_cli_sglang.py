"""`kvwise simulate --engine sglang`: SGLang's scheduler model (radix cache, prefill first,
retraction) on the SGLang planner's pool, through the command line, in text and JSON.

SGLang itself does not run on this machine (its wheel is CUDA-only): these runs check what the
simulation of it tells a user, and that it is the simulation `plan --engine vllm,sglang` runs.
"""

from __future__ import annotations

import json

import pytest

from kvwise.cli import main
from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import resolve_gpu
from kvwise.planner.sglang import SglangFlags, plan_sglang

MODEL, GPU = "Qwen/Qwen2.5-7B-Instruct", "rtx4090"
AGENTS = ["--workload", "agent", "--sessions", "8", "--turns", "3"]
SGLANG = ["simulate", MODEL, "--gpu", GPU, *AGENTS, "--engine", "sglang"]
# a pool of ~19k tokens for 8 agent sessions of ~4k-token histories plus 512-token answers
SMALL_POOL = ["--mem-fraction-static", "0.66", "--context-length", "16384"]


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_a_too_small_pool_makes_sglang_retract_where_vllm_preempts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = _json(capsys, *SGLANG, *SMALL_POOL)
    model, gpu = load_model(MODEL), resolve_gpu(GPU, None, detect=False)
    planned = plan_sglang(
        model, gpu, VllmFlags(max_model_len=16384), SglangFlags(mem_fraction_static=0.66)
    )
    assert data["engine"] == "sglang"
    assert data["config"]["max_total_num_tokens"] == planned.max_total_num_tokens  # its planner's
    assert data["config"]["flags"]["page_size"] == 1
    assert data["num_retractions"] >= 1 and data["num_retractions"] == data["num_preemptions"]
    assert data["completed"] == 24 and data["rejected"] == 0  # retracted requests still finish
    assert data["bands"] is None and "vLLM" in data["bands_note"]
    text = _text(capsys, *SGLANG, *SMALL_POOL)
    assert "retractions hit" in text and "end of the waiting queue" in text
    assert "preemption" not in text
    # vLLM on a pool of about the same size preempts instead, and says so
    vllm = ["simulate", MODEL, "--gpu", GPU, *AGENTS, "--kv-cache-memory-bytes", "1.05G",
            "--max-model-len", "16384"]  # fmt: skip
    vllm_text = _text(capsys, *vllm)
    assert "preemptions (recomputed from scratch)" in vllm_text and "retraction" not in vllm_text
    # at SGLang's default fraction the pool holds the load: nothing is retracted
    assert _json(capsys, *SGLANG)["num_retractions"] == 0


def test_the_radix_cache_serves_agent_histories(capsys: pytest.CaptureFixture[str]) -> None:
    cached = _json(capsys, *SGLANG)
    uncached = _json(capsys, *SGLANG, "--disable-radix-cache")
    assert cached["prefix_cache_hit_rate"] > 0.5  # each turn resends the session's history
    assert uncached["prefix_cache_hit_rate"] == 0.0
    assert uncached["config"]["flags"]["disable_radix_cache"] is True
    assert uncached["mean_ttft_ms"] > 2 * cached["mean_ttft_ms"]  # whole prompts recomputed
    # matched to the token, SGLang's cache hits at least what vLLM's 16-token blocks hit
    vllm = _json(capsys, "simulate", MODEL, "--gpu", GPU, *AGENTS)
    assert cached["prefix_cache_hit_rate"] >= vllm["prefix_cache_hit_rate"]


def test_simulate_runs_what_plan_compares(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan --workload ... --engine vllm,sglang` and `simulate --engine sglang` tell one story."""
    planned = _json(capsys, "plan", MODEL, "--gpu", GPU, *AGENTS, "--engine", "vllm,sglang")
    (sglang_run,) = [run for run in planned["engines"] if run["engine"] == "sglang"]
    simulated = _json(capsys, *SGLANG)
    assert simulated["config"]["kv_tokens"] == sglang_run["kv_pool_tokens"]
    for key, value in sglang_run["metrics"].items():
        assert simulated[key] == pytest.approx(value, rel=1e-5), key


def test_sglangs_own_flags_reach_its_scheduler(capsys: pytest.CaptureFixture[str]) -> None:
    default = _json(capsys, *SGLANG)
    capped = _json(capsys, *SGLANG, "--max-running-requests", "2", "--chunked-prefill-size", "512")
    flags = capped["config"]["flags"]
    assert (flags["max_running_requests"], flags["chunked_prefill_size"]) == (2, 512)
    assert capped["mean_queue_ms"] > 5 * default["mean_queue_ms"]  # 8 sessions, 2 may run
    lpm = _json(capsys, *SGLANG, "--schedule-policy", "lpm")
    assert lpm["config"]["flags"]["schedule_policy"] == "lpm"
    assert default["config"]["flags"]["schedule_policy"] == "fcfs"  # the newest release's


def test_compare_runs_sglang_flag_sets_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, *SGLANG, *SMALL_POOL, "--compare", "--mem-fraction-static 0.8")
    base, larger = data["compare"]
    assert larger["label"] == "--mem-fraction-static 0.8"
    assert larger["config"]["flags"]["context_length"] == 16384  # the base's, kept
    assert larger["config"]["max_total_num_tokens"] > base["config"]["max_total_num_tokens"]
    assert larger["metrics"]["num_retractions"] <= base["metrics"]["num_retractions"]


@pytest.mark.parametrize(
    ("flag", "instead"),
    [
        (["--max-num-seqs", "8"], "--max-running-requests"),
        (["--gpu-memory-utilization", "0.8"], "--mem-fraction-static"),
        (["--no-enable-prefix-caching"], "--disable-radix-cache"),
        (["--max-num-batched-tokens", "4096"], "--chunked-prefill-size"),
        (["--compare", "--block-size 32"], "page_size 1"),
    ],
)
def test_a_vllm_only_flag_names_sglangs_own(
    capsys: pytest.CaptureFixture[str], flag: list[str], instead: str
) -> None:
    assert main([*SGLANG, *flag]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "vLLM's, not SGLang's" in err and instead in err


def test_an_sglang_flag_without_engine_sglang_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", MODEL, "--gpu", GPU, *AGENTS, "--mem-fraction-static", "0.8"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--engine sglang" in err
    assert "--gpu-memory-utilization" in err
    assert main(["simulate", MODEL, "--gpu", GPU, *AGENTS, "--engine", "vllm,sglang"]) == 2
    assert "kvwise plan" in capsys.readouterr().err  # comparing engines is plan's


def test_a_fraction_that_leaves_no_kv_is_sglangs_own_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*SGLANG, "--mem-fraction-static", "0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "SGLang would not start" in err and "--mem-fraction-static" in err
