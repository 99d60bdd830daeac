"""`kvwise plan` as a user runs it: exit codes, JSON, pasted commands, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvwise.cli import main


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvwise.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_canonical_plan_prints_a_table_and_exits_zero() -> None:
    done = _run("plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090")
    assert done.returncode == 0, done.stderr
    assert "vLLM starts" in done.stdout and "KV cache" in done.stdout


def test_json_output_is_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["starts"] is True and data["kv"]["bytes_per_token"] == 57344
    assert data["flags"]["max_model_len"] == 32768


def test_refused_start_exits_one_with_vllms_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "plan",
            "Qwen/Qwen2.5-7B-Instruct",
            "--gpu",
            "rtx4090",
            "--gpu-memory-utilization",
            "0.6",
            "--json",
        ]
    )
    assert code == 1
    assert json.loads(capsys.readouterr().out)["error"]["kind"] == "no_kv_cache_memory"


def test_pasted_vllm_command_is_planned(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "plan",
        "--gpu",
        "rtx4090",
        "--json",
        "--",
        "vllm",
        "serve",
        "Qwen/Qwen2.5-7B-Instruct",
        "--max-model-len",
        "8192",
        "--gpu-memory-utilization",
        "0.85",
        "--disable-log-requests",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert (
        data["flags"]["max_model_len"] == 8192 and data["flags"]["gpu_memory_utilization"] == 0.85
    )
    assert "--disable-log-requests changes no memory figure" in captured.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "Qwen/Qwen2.5-7B-Instrut", "--gpu", "rtx4090"], "closest catalog entries"),
        (["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "gtx9090"], "unknown GPU"),
        (
            [
                "plan",
                "Qwen/Qwen2.5-7B-Instruct",
                "--gpu",
                "rtx4090",
                "--gpu-memory-utilization",
                "1.2",
            ],
            "(0, 1]",
        ),
        (["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "-tp", "3"], "divisible"),
        (
            ["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--max-num-seqs", "-4"],
            "positive",
        ),
        (
            ["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--kv-cache-dtype", "int3"],
            "one of",
        ),
        (
            ["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--max-model-len", "lots"],
            "not a length",
        ),
        (["plan", "Qwen/Qwen2.5-7B-Instruct"], "no --gpu given"),
        (["plan"], "give a MODEL"),
        (["nonsense"], "unknown command"),
    ],
)
def test_bad_input_is_one_line_and_exit_two(args: list[str], message: str) -> None:
    done = _run(*args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_explain_settles_the_folk_tips_in_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--explain", "--json"]) == 0
    )
    data = json.loads(capsys.readouterr().out)
    knobs = {k["knob"]: k for k in data["knobs"]}
    base = data["plan"]["kv"]["tokens"]
    assert knobs["--kv-cache-dtype fp8"]["kv_tokens"] > 1.9 * base  # true: fp8 doubles tokens
    assert (
        knobs["--gpu-memory-utilization -0.1"]["kv_tokens"] < base
    )  # backwards: lower util, less KV
    assert knobs["--max-model-len 8192"]["kv_tokens"] == base  # false: no per-sequence reservation
    assert knobs["--no-enable-prefix-caching"]["kv_tokens"] == base  # false: prefix caching is free
    assert knobs["AWQ 4-bit checkpoint"]["kv_tokens"] > 2 * base  # true, and more than doubles KV


def test_sglang_plan_reports_its_pool_and_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "h100", "--engine", "sglang", "--json"])
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    # SGLang's default fraction on an 80 GB H100 is about 0.83 (docs/sglang_rules.md)
    assert data["mem_fraction_static"] == pytest.approx(0.83, abs=0.01)
    assert data["command"].startswith(
        "python -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct"
    )
    assert data["max_total_num_tokens"] > 0


def test_catalog_listings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--json"]) == 0
    models = json.loads(capsys.readouterr().out)
    assert any(m["id"] == "Qwen/Qwen2.5-7B-Instruct" and m["modelled"] for m in models)
    assert main(["gpus", "--json"]) == 0
    assert any(g["name"] == "RTX 4090" for g in json.loads(capsys.readouterr().out))


def test_pasted_command_with_lora_flags_plans_the_adapter_slots(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["plan", "--gpu", "h100", "--vllm-version", "0.19.0", "--json", "--", "vllm", "serve"]
    model = ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"]
    lora = ["--enable-lora", "--max-loras", "4", "--max-lora-rank", "64", "--max-cpu-loras", "8"]
    assert main([*base, *model]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*base, *model, *lora]) == 0
    with_lora = json.loads(capsys.readouterr().out)
    added_gib = with_lora["memory_gib"]["weights"] - plain["memory_gib"]["weights"]
    assert added_gib == pytest.approx(
        1_477_705_728 / 2**30, abs=0.002
    )  # by hand: test_release_rules


def test_lora_on_a_moe_model_is_one_not_modelled_line() -> None:
    done = _run("plan", "Qwen/Qwen3-30B-A3B", "--gpu", "h100", "--enable-lora")
    assert done.returncode == 2
    assert "not modelled: LoRA" in done.stderr and "Traceback" not in done.stderr


TOOL_FLAGS = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]


def test_pasted_flags_kvwise_does_not_model_are_kept_in_the_printed_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pasted = ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "16384"]
    assert main(["plan", "--gpu", "rtx4090", "--", *pasted, *TOOL_FLAGS]) == 0
    captured = capsys.readouterr()
    command = next(line for line in captured.out.splitlines() if line.startswith("vllm serve"))
    # one line, however narrow the terminal, with the agent's tool-calling flags as pasted
    assert command.endswith(" ".join(TOOL_FLAGS)) and "--max-model-len 16384" in command
    assert "--tool-call-parser" in captured.err  # and the user is told they change no figure


def test_a_recommendation_keeps_them_too_and_names_the_gpu_by_its_key(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pasted = ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", *TOOL_FLAGS]
    argv = ["plan", "--gpu", "rtx4090", "--workload", "agent", "--sessions", "4", "--turns", "6"]
    assert main([*argv, "--json", "--", *pasted]) == 0
    best = json.loads(capsys.readouterr().out)["recommendations"][0]["commands"]
    assert best["vllm"].endswith(" ".join(TOOL_FLAGS))
    assert "--gpu rtx4090 --launch" in best["kvwise_serve"]


def test_a_verdict_kvwise_does_not_model_is_said_not_guessed() -> None:
    # TP 4 over PCIe L4s: NCCL carries the all-reduces captured in the graphs, and 0.9 leaves
    # less room beside the budget than vLLM's own 3 GiB bound for graphs
    args = ["plan", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "l4"]
    args += ["--tensor-parallel-size", "4", "--max-model-len", "8192", "--vllm-version", "0.6.5"]
    table = _run(*args)
    assert table.returncode == 1, table.stderr  # not known to start
    assert "verdict not modelled: CUDA-graph capture at TP 4" in " ".join(table.stdout.split())
    assert "vLLM starts" not in table.stdout and "refuses" not in table.stdout
    data = json.loads(_run(*args, "--json").stdout)
    assert data["starts"] is False and data["error"] is None
    assert data["verdict_not_modelled"].startswith("not modelled: CUDA-graph capture at TP 4")
    assert data["kv"]["tokens"] > 0


def test_explain_names_a_variant_whose_verdict_is_not_modelled() -> None:
    args = ["plan", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "l4", "--explain", "--json"]
    args += ["--tensor-parallel-size", "4", "--max-model-len", "8192", "--vllm-version", "0.6.5"]
    done = _run(*args)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    knobs = {k["knob"]: k for k in json.loads(done.stdout)["knobs"]}
    assert knobs["--enforce-eager"]["starts"] is True  # no graphs, no NCCL in them
    # a variant that keeps 0.9 says its verdict is not modelled instead of naming an error
    effect = knobs["--block-size 8"]["effect"]
    assert "start/fail verdict not modelled: CUDA-graph capture at TP 4" in effect


def test_vllm_use_v1_0_plans_the_v0_engine_of_0_8_to_0_10_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # vllm#15360: the same LLM() on an A10G under 0.8.1, once as is and once with VLLM_USE_V1=0
    args = ["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "a10g", "--vllm-version", "0.8.1"]
    args += ["--max-model-len", "6600", "--json"]
    main(args)
    v1 = json.loads(capsys.readouterr().out)
    assert main([*args, "--vllm-use-v1", "0"]) == 0
    v0 = json.loads(capsys.readouterr().out)
    assert (v1["engine"], v0["engine"]) == ("V1", "V0")
    # V0's profile has no sampler pass over max_num_seqs x vocab logits: more room for the KV cache
    assert v0["kv"]["tokens"] > v1["kv"]["tokens"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        # 0.10.1's _raise_or_fallback: VLLM_USE_V1=1 turns the fp8-KV fallback into an error
        (
            ["--vllm-version", "0.10.1.1", "--kv-cache-dtype", "fp8", "--vllm-use-v1", "1"],
            "VLLM_USE_V1=1 is not supported with --kv-cache-dtype",
        ),
        (["--vllm-version", "0.11.0", "--vllm-use-v1", "0"], "0.8.0-0.10.1 only"),
    ],
)
def test_vllm_use_v1_outside_its_releases_or_with_a_fallback_is_refused(
    extra: list[str], message: str
) -> None:
    done = _run("plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx3090", *extra)
    assert done.returncode == 2, done.stdout
    assert message in done.stderr
