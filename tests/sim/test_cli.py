"""`kvwise simulate`: the table, JSON with vLLM's keys, --compare, charts, one-line errors."""

from __future__ import annotations

import json
import re
import xml.dom.minidom
from pathlib import Path

import pytest

from kvwise.cli import main
from kvwise.core.calibration import Calibration, calibration_path, save_calibration

BASE = ["simulate", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--max-model-len", "8192"]
SMALL = [
    "--workload",
    "random",
    "--num-prompts",
    "30",
    "--input-len",
    "200",
    "--output-len",
    "50",
    "--request-rate",
    "5",
]
VLLM_BENCH_KEYS = (
    "completed",
    "duration",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "mean_e2el_ms",
    "median_e2el_ms",
)


def run_json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    assert main([*BASE, *SMALL, "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_has_vllm_bench_keys_and_kvwise_extras(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys)
    for key in (
        *VLLM_BENCH_KEYS,
        "num_preemptions",
        "max_kv_usage",
        "mean_kv_usage",
        "prefix_cache_hit_rate",
        "mean_queue_ms",
        "rejected",
    ):
        assert key in out, key
    assert out["completed"] == 30 and out["rejected"] == 0
    assert out["config"]["flags"]["max_model_len"] == 8192
    assert out["config"]["num_gpu_blocks"] > 1000
    assert out["workload"]["kind"] == "random"


def test_a_closed_loop_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--workload", "random", "--num-prompts", "12", "--max-concurrency", "4", "--json"]
    assert main([*BASE, *args]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["workload"]["max_concurrency"] == 4 and out["completed"] == 12


def test_warm_cache_serves_the_prompts_from_the_prefix_cache(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cold, warm = run_json(capsys), run_json(capsys, "--warm-cache")
    assert cold["prefix_cache_hit_rate"] == 0
    # 200-token prompts: 12 of their 13 blocks (192 tokens) are hits, the last is computed
    assert warm["prefix_cache_hit_rate"] == pytest.approx(192 / 200)
    assert warm["median_ttft_ms"] < cold["median_ttft_ms"]


def test_same_seed_same_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_json(capsys, "--seed", "5") == run_json(capsys, "--seed", "5")


def test_a_users_calibration_drives_the_simulation_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shipped = run_json(capsys)
    assert "not calibrated" in shipped["config"]["step_time_source"]
    coefficients = shipped["config"]["step_time_coefficients"]
    slower = {name: value * 2 for name, value in coefficients.items()}  # a slower card than ours
    save_calibration(
        Calibration("RTX 4090", "Qwen/Qwen2.5-7B-Instruct", slower, "2026-11-30T10:00:00+00:00",
                    calibration_path(), ("bench-1.json",), 64)
    )  # fmt: skip
    calibrated = run_json(capsys)
    assert "calibrated" in calibrated["config"]["step_time_source"]
    assert "not calibrated" not in calibrated["config"]["step_time_source"]
    assert calibrated["mean_tpot_ms"] > 1.5 * shipped["mean_tpot_ms"]
    assert main([*BASE, *SMALL]) == 0  # the table says where its step times come from
    assert calibrated["config"]["step_time_source"] in capsys.readouterr().out


def test_compare_runs_each_flag_set(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "--compare", "--kv-cache-dtype fp8", "--max-num-seqs 4")
    labels = [c["label"] for c in out["compare"]]
    assert labels == ["base", "--kv-cache-dtype fp8", "--max-num-seqs 4"]
    blocks = [c["config"]["num_gpu_blocks"] for c in out["compare"]]
    assert blocks[1] == pytest.approx(2 * blocks[0], rel=0.01)  # fp8 KV: twice the blocks
    assert out["compare"][2]["config"]["flags"]["max_num_seqs"] == 4


def test_the_table_names_the_deployment_and_the_findings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        *BASE,
        "--workload",
        "agent",
        "--sessions",
        "6",
        "--turns",
        "12",
        "--think-time-s",
        "0.5",
        "--gpu-memory-utilization",
        "0.75",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "RTX 4090" in out and "KV pool" in out and "output tokens/s" in out
    # histories outgrow 8192 tokens: trimmed as the gateway trims them, and the table says so
    assert "histories trimmed to 8,192 tokens" in out
    # the pool is the one `kvwise plan` reports for the same flags
    main(["plan", *BASE[1:], "--gpu-memory-utilization", "0.75", "--json"])
    tokens = json.loads(capsys.readouterr().out)["kv"]["tokens"]
    assert f"KV pool {tokens:,} tokens" in out


def test_charts_as_self_contained_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = tmp_path / "run.html"
    run_json(capsys, "--plot", str(chart), "--compare", "--max-num-seqs 4")
    text = chart.read_text()
    assert text.count("<svg") == 5 and "KV-cache use" in text and "<script" not in text
    for svg in re.findall(r"<svg.*?</svg>", text, re.S):
        xml.dom.minidom.parseString(svg)  # well-formed, inline
        # one line per configuration, each named in the chart's legend
        assert svg.count("<polyline") == 2 and "--max-num-seqs 4" in svg


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*BASE, "--workload", "chat"], "unknown workload 'chat'"),
        (
            [*BASE, "--workload", "random", "--request-rate", "-2"],
            "--request-rate must be positive",
        ),
        (
            [*BASE, "--workload", "random", "--input-len", "9000", "--num-prompts", "3"],
            "every request exceeds max_model_len (8192)",
        ),
        (
            [*BASE, "--workload", "random", "--compare", "--max-num-seqs zero"],
            "--compare '--max-num-seqs zero'",
        ),
        (
            ["simulate", "no-such/model", "--gpu", "rtx4090", "--workload", "random"],
            "unknown model",
        ),
        ([*BASE[:2], "--workload", "random"], "give --gpu"),
        ([*BASE, *SMALL, "--plot", "chart.png"], "use a .html file name"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


AGENT = [
    "--workload",
    "agent",
    "--sessions",
    "6",
    "--turns",
    "20",
    "--system-prompt",
    "2000",
    "--tool-output",
    "800",
    "--max-tokens",
    "512",
]


def _run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    main([*argv, "--json"])
    return json.loads(capsys.readouterr().out)


def test_simulate_and_plan_workload_tell_the_same_story_of_an_agent_workload(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Histories outgrow the 8,192-token context: both commands trim them as the gateway does, so
    every turn runs, and both report the same latency and preemptions for vLLM's defaults."""
    simulated = _run_json([*BASE, *AGENT], capsys)
    planned = _run_json(["plan", *BASE[1:], *AGENT], capsys)["baseline"]
    assert simulated["completed"] == 6 * 20
    assert simulated["rejected"] == 0 == planned["rejected"]
    assert simulated["num_preemptions"] == planned["num_preemptions"]
    assert simulated["p99_ttft_ms"] == pytest.approx(planned["p99_ttft_ms"], abs=0.1)


def test_without_history_trimming_turns_past_the_context_are_rejected(
    capsys: pytest.CaptureFixture[str],
) -> None:
    whole = _run_json([*BASE, *AGENT, "--no-history-trimming"], capsys)
    assert whole["rejected"] > 0
    assert whole["completed"] + whole["rejected"] < 6 * 20  # a session ends at its first refusal


def test_the_report_names_the_gpus_and_link_a_replica_spans(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # a user who asked for two PCIe A100s without peer-to-peer sees that this is what ran
    args = ["simulate", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "a100-80gb-pcie", *SMALL]
    assert main([*args, "--tensor-parallel-size", "2", "--interconnect", "pcie-nop2p"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "TP 2 x PP 1 on 2 x A100 PCIe 80GB" in text and "peer-to-peer" in text
    assert main(args) == 0
    assert "TP " not in capsys.readouterr().out  # one GPU: nothing to say
