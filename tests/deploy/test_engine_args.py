"""The arguments in the artefacts are the plan: pasted back into `kvwise plan` they give the same
flags, the gateway's own parser takes the gateway's, and nothing the user set is dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvwise.cli import main
from kvwise.gateway.cli import build_parser as gateway_parser
from tests.deploy.helpers import by_kind, container, deploy, documents

FLAG_SETS = [
    [],
    ["--tensor-parallel-size", "2"],
    ["--max-model-len", "8192", "--kv-cache-dtype", "fp8", "--max-num-seqs", "32"],
    ["--enforce-eager", "--gpu-memory-utilization", "0.85"],
]


@pytest.mark.parametrize("extra", FLAG_SETS)
def test_the_replicas_command_pasted_into_plan_gives_the_same_plan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str]
) -> None:
    deploy(capsys, tmp_path, "--target", "k8s", *extra)
    vllm = container(by_kind(documents(tmp_path / "vllm.yaml"), "Deployment")[0])
    pasted = ["--", *vllm["command"], *vllm["args"]]
    assert main(["plan", "--gpu", "rtx4090", "--json", *pasted]) == 0
    from_pasted = json.loads(capsys.readouterr().out)["flags"]
    assert main(["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--json", *extra]) == 0
    from_flags = json.loads(capsys.readouterr().out)["flags"]
    assert from_pasted.pop("extra_args") == ["--host", "0.0.0.0", "--port", "8000"]
    from_flags.pop("extra_args")
    assert from_pasted == from_flags


def test_kvwise_serve_accepts_the_gateway_command_as_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deploy(capsys, tmp_path, "--replicas", "2", "--target", "k8s", "--max-model-len", "16384")
    gateway = container(by_kind(documents(tmp_path / "gateway.yaml"), "Deployment")[0])
    assert gateway["command"] == ["kvwise", "serve"]
    args = gateway_parser().parse_args(gateway["args"])
    assert args.model == "Qwen/Qwen2.5-7B-Instruct"
    assert args.gpu == "rtx4090" and args.max_model_len == 16384
    assert args.upstream_dns == "vllm:8000" and args.host == "0.0.0.0"
    assert args.session_store.startswith("redis://")


def test_lora_and_prefix_caching_choices_reach_vllm(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    extra = ["--enable-lora", "--max-loras", "2", "--max-lora-rank", "16"]
    deploy(capsys, tmp_path, "--target", "k8s", "--no-enable-prefix-caching", *extra)
    args = container(by_kind(documents(tmp_path / "vllm.yaml"), "Deployment")[0])["args"]
    assert args.count("--enable-lora") == 1
    assert args[args.index("--max-loras") + 1] == "2"
    assert args[args.index("--max-lora-rank") + 1] == "16"
    assert args.count("--no-enable-prefix-caching") == 1


def test_with_a_workload_the_advisors_pick_is_deployed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    workload = ["--workload", "agent", "--num-gpus", "2"]
    assert main(["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--json", *workload]) == 0
    best = json.loads(capsys.readouterr().out)["recommendations"][0]
    summary = deploy(capsys, tmp_path, "--target", "k8s", *workload)
    deployments = by_kind(documents(tmp_path / "vllm.yaml"), "Deployment")
    assert len(deployments) == best["replicas"]
    assert summary["replicas"] * summary["gpus_per_replica"] <= 2
    args = container(deployments[0])["args"]
    assert args[0] == best["model"]
    for name in ("max_num_seqs", "kv_cache_dtype", "tensor_parallel_size"):
        flag = f"--{name.replace('_', '-')}"
        assert args[args.index(flag) + 1] == str(best["flags"][name])
