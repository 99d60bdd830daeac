"""`kvwise plan MODEL --gpu G --workload ... --engine vllm,sglang`: both engines simulated on the
same workload, one recommended with its numbers and reasons, in text and in JSON."""

from __future__ import annotations

import json

import pytest

from kvwise.cli import main
from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import resolve_gpu
from kvwise.planner import plan
from kvwise.planner.sglang import plan_sglang

ARGS = ["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--workload", "agent",
        "--sessions", "2", "--turns", "3", "--engine", "vllm,sglang"]  # fmt: skip


def test_the_json_names_the_engine_the_numbers_favour(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    runs = {run["engine"]: run for run in data["engines"]}
    assert set(runs) == {"vllm", "sglang"}
    model, gpu = load_model("Qwen/Qwen2.5-7B-Instruct"), resolve_gpu("rtx4090", None, detect=False)
    # each engine runs on the pool its own planner gives it
    assert runs["vllm"]["kv_pool_tokens"] == plan(model, gpu, VllmFlags()).kv.tokens
    sglang_pool = plan_sglang(model, gpu, VllmFlags()).max_total_num_tokens
    assert runs["sglang"]["kv_pool_tokens"] == sglang_pool
    best = runs[data["recommended_engine"]]["metrics"]
    other = runs[({"vllm", "sglang"} - {data["recommended_engine"]}).pop()]["metrics"]
    assert best["rejected"] == other["rejected"] == 0
    # more output per second, or a tie within 2 % and no worse p99 TTFT
    assert best["output_throughput"] >= other["output_throughput"] * 0.98
    if best["output_throughput"] < other["output_throughput"]:
        assert best["p99_ttft_ms"] <= other["p99_ttft_ms"]
    throughput_reason = (
        f"output {best['output_throughput']:,.1f} vs {other['output_throughput']:,.1f}"
    )
    assert any(throughput_reason in reason for reason in data["reasons"])
    assert any(f"KV pool {runs[data['recommended_engine']]['kv_pool_tokens']:,}" in r
               for r in data["reasons"])  # fmt: skip


def test_the_text_puts_both_engines_side_by_side_and_says_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(ARGS) == 0
    text = capsys.readouterr().out
    assert "vLLM" in text and "SGLang" in text
    assert "preemptions / retractions" in text
    line = next(line for line in text.splitlines() if line.startswith("recommended: "))
    assert line in ("recommended: vLLM, because", "recommended: SGLang, because")
    assert "SGLang 0.5.14+: mem_fraction_static" in text


def test_comparing_without_a_workload_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--engine", "vllm,sglang"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--workload" in err
    assert main([*argv[:-1], "tgi"]) == 2


def test_a_light_load_is_a_tie_and_the_larger_pool_decides(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two sessions fit either pool: both engines serve them alike. vLLM's pool is the larger at
    its default gpu_memory_utilization; at 0.8 SGLang's is, and the answer follows."""
    assert main([*ARGS, "--json"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert main([*ARGS, "--json", "--gpu-memory-utilization", "0.8"]) == 0
    lowered = json.loads(capsys.readouterr().out)
    pools = {r["engine"]: r["kv_pool_tokens"] for r in lowered["engines"]}
    assert pools["vllm"] < pools["sglang"]
    assert default["recommended_engine"] == "vllm" and lowered["recommended_engine"] == "sglang"
    assert lowered["reasons"][0].startswith("a tie within 2%")
    assert "SGLang has the larger KV pool" in lowered["reasons"][0]
