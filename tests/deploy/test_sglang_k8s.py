"""`kvwise deploy --engine sglang --target k8s`: SGLang replicas Kubernetes accepts in strict
mode, from SGLang's official image pinned to the planned release, with every planned flag, and a
gateway that plans the same pool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from kvwise.cli import main
from kvwise.gateway.cli import build_parser
from kvwise.gateway.discovery import plan_limits
from tests.deploy.helpers import K8S_VERSION, MODEL, by_kind, container, deploy, documents


def _sglang_plan(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """What `kvwise plan --engine sglang --json` says for the same model, card and flags."""
    assert main(["plan", MODEL, "--gpu", "rtx4090", "--engine", "sglang", "--json", *argv]) == 0
    return dict(json.loads(capsys.readouterr().out))


@pytest.mark.parametrize("extra", [[], ["--tensor-parallel-size", "2"]], ids=["tp1", "tp2"])
def test_sglang_replicas_pass_strict_validation_and_run_the_plan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str]
) -> None:
    summary = deploy(capsys, tmp_path, "--engine", "sglang", "--target", "k8s", "--replicas",
                     "2", *extra)  # fmt: skip
    docs = [doc for path in sorted(tmp_path.glob("*.yaml")) for doc in documents(path)]
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    planned = _sglang_plan(capsys, *extra)
    replicas = by_kind(documents(tmp_path / "sglang.yaml"), "Deployment")
    assert [d["metadata"]["name"] for d in replicas] == ["sglang-0", "sglang-1"]
    engine = container(replicas[0])
    assert engine["image"] == "lmsysorg/sglang:v0.5.23" == summary["image"]
    assert engine["command"] == ["python3", "-m", "sglang.launch_server"]
    args = engine["args"]
    expected = {
        "--model-path": MODEL,
        "--mem-fraction-static": str(planned["mem_fraction_static"]),
        "--context-length": str(planned["context_length"]),
        "--max-running-requests": str(planned["max_running_requests"]),
        "--chunked-prefill-size": str(planned["chunked_prefill_size"]),
        "--cuda-graph-max-bs": str(planned["cuda_graph_max_bs"]),
        "--port": "8000",
    }
    if extra:
        expected["--tp"] = "2"
    for flag, value in expected.items():
        assert args.count(flag) == 1 and args[args.index(flag) + 1] == value, flag
    assert "--enable-metrics" in args  # the gateway reads SGLang's load from /metrics
    assert engine["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == ("2" if extra else "1")


def test_the_gateway_plans_the_pool_the_replicas_start_with(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deploy(capsys, tmp_path, "--engine", "sglang", "--target", "k8s")
    (gateway,) = by_kind(documents(tmp_path / "gateway.yaml"), "Deployment")
    args = build_parser().parse_args(container(gateway)["args"])
    planned = plan_limits(args)
    assert planned is not None
    assert planned.kv_tokens == _sglang_plan(capsys)["max_total_num_tokens"]


def test_the_image_follows_the_release_asked_for(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    summary = deploy(capsys, tmp_path, "--engine", "sglang", "--target", "k8s",
                     "--sglang-version", "0.4.6")  # fmt: skip
    assert summary["image"] == "lmsysorg/sglang:v0.4.6"


@pytest.mark.parametrize("target", ["helm", "ray"])
def test_targets_that_cannot_run_sglang_say_so_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, target: str
) -> None:
    argv = ["deploy", MODEL, "--gpu", "rtx4090", "--engine", "sglang", "--target", target,
            "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--target k8s" in err
    assert not list(tmp_path.iterdir())
