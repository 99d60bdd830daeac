"""vLLM's V0 engine (VLLM_USE_V1=0 on 0.8-0.10.1, the default before 0.8): its scheduler
and the host CPU its step loop spends per running sequence (kvwise.sim.deploy.V0_SEQ_CPU_S)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.sim import deploy
from kvwise.sim.runner import simulate
from kvwise.sim.workloads import WorkloadSpec

UNSEEN = (
    Path(__file__).resolve().parents[1] / "data/validation/unseen/serving_benchmarks_unseen.jsonl"
)
FULL_BATCH = WorkloadSpec("random", num_prompts=300, input_len=256, output_len=128)


def _v0_tpot_ms() -> float:
    dep = deploy.deployment(
        load_model("mistralai/Mistral-7B-v0.3"),
        find_gpu("a100-pcie-40gb"),
        VllmFlags(),
        vllm_version="0.9.1",
        vllm_use_v1=False,
    )
    assert dep.plan.engine == "V0"  # not 0.9.1's default V1
    return float(simulate(dep.config, FULL_BATCH, 0).metrics["mean_tpot_ms"])


def test_vllm_use_v1_0_decodes_a_full_batch_slower_by_the_host_cpu_per_sequence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cost_s = deploy.V0_SEQ_CPU_S
    v0 = _v0_tpot_ms()
    monkeypatch.setattr(deploy, "V0_SEQ_CPU_S", 0.0)
    v0_without_cpu = _v0_tpot_ms()
    # at most 256 running sequences x the cost: a few ms more per step on a ~40 ms A100 step
    assert v0 > v0_without_cpu * 1.1
    assert v0 - v0_without_cpu < 256 * cost_s * 1e3


def test_v0_with_chunked_prefill_serves_prompts_longer_than_its_token_budget() -> None:
    """0.9.1's V0 turns chunked prefill on above a 32K context (arg_utils.py:
    EngineArgs._set_default_args_v0) with a 2,048-token budget: a 4,096-token prompt is
    prefilled in chunks, not left waiting for a step that could take it whole."""
    dep = deploy.deployment(
        load_model("Qwen/Qwen3-8B"),
        find_gpu("a100-pcie-40gb"),
        VllmFlags(),
        vllm_version="0.9.1",
        vllm_use_v1=False,
    )
    assert dep.plan.engine == "V0"
    assert dep.plan.flags.enable_chunked_prefill
    assert dep.plan.flags.max_num_batched_tokens < 4096
    spec = WorkloadSpec("random", num_prompts=20, input_len=4096, output_len=64)
    metrics = simulate(dep.config, spec, 0).metrics
    assert metrics["completed"] == 20


def test_the_unseen_runs_made_with_vllm_use_v1_0_are_simulated_on_v0() -> None:
    """livinfly ran 0.9.1 with VLLM_USE_V1=0 (its README): without the variable the planner
    would pick 0.9.1's default V1 engine."""
    from tests.sim.fidelity_unseen import load_spec, load_unseen

    cases, _ = load_unseen(UNSEEN)
    livinfly = [c for c in cases if c.source == "livinfly"]
    assert livinfly
    for case in livinfly[:3]:
        assert case.vllm_use_v1 is False
        dep = deploy.deployment(
            load_spec(case.model),
            find_gpu(case.gpu),
            case.flags,
            vllm_version=case.vllm_version,
            vllm_use_v1=case.vllm_use_v1,
        )
        assert dep.plan.engine == "V0"


def test_simulate_takes_vllm_use_v1_as_the_server_ran(capsys: pytest.CaptureFixture[str]) -> None:
    from kvwise.cli import main

    base = ["simulate", "mistralai/Mistral-7B-v0.3", "--gpu", "a100-pcie-40gb"]
    small = ["--vllm-version", "0.9.1", "--workload", "random", "--num-prompts", "20"]
    assert main([*base, *small, "--vllm-use-v1", "0"]) == 0
    assert "vLLM 0.9.1 (V0)" in capsys.readouterr().out
    assert main([*base, *small]) == 0
    assert "vLLM 0.9.1 (V1)" in capsys.readouterr().out
