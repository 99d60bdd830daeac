"""`kvwise deploy --target k8s`: manifests Kubernetes accepts in strict mode, carrying the plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.helpers import (
    K8S_VERSION,
    assert_each_flag_once,
    by_kind,
    container,
    deploy,
    documents,
    expected_flag_values,
    plan_flags,
)


def _all_docs(out: Path) -> list[dict[str, Any]]:
    return [doc for path in sorted(out.glob("*.yaml")) for doc in documents(path)]


def _vllm_deployments(out: Path) -> list[dict[str, Any]]:
    return [d for d in by_kind(documents(out / "vllm.yaml"), "Deployment")]


@pytest.mark.parametrize("extra", [[], ["--tensor-parallel-size", "2"]], ids=["tp1", "tp2"])
def test_every_manifest_passes_kubernetes_strict_validation(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str]
) -> None:
    deploy(capsys, tmp_path, "--replicas", "2", "--target", "k8s", *extra)
    docs = _all_docs(tmp_path)
    assert {doc["kind"] for doc in docs} >= {
        "Deployment",
        "Service",
        "PersistentVolumeClaim",
        "PodDisruptionBudget",
    }
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_a_misspelt_field_would_fail_the_validator_used_above() -> None:
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "x"},
        "spec": {"accesModes": ["ReadWriteOnce"]},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(claim, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    "extra", [[], ["--tensor-parallel-size", "2"], ["--max-model-len", "8192"]]
)
def test_each_replica_runs_the_planned_flags_once_with_the_plans_values(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str]
) -> None:
    wanted = expected_flag_values(plan_flags(capsys, *extra))
    deploy(capsys, tmp_path, "--replicas", "2", "--target", "k8s", *extra)
    deployments = _vllm_deployments(tmp_path)
    assert len(deployments) == 2
    for deployment in deployments:
        vllm = container(deployment)
        assert vllm["command"] == ["vllm", "serve"]
        assert vllm["args"][0] == "Qwen/Qwen2.5-7B-Instruct"
        assert_each_flag_once(vllm["args"], wanted)


@pytest.mark.parametrize(("tp", "gpus"), [("1", "1"), ("2", "2")])
def test_gpus_per_replica_are_tensor_times_pipeline_parallel(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tp: str, gpus: str
) -> None:
    deploy(capsys, tmp_path, "--target", "k8s", "--tensor-parallel-size", tp)
    resources = container(_vllm_deployments(tmp_path)[0])["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == gpus
    assert resources["limits"]["nvidia.com/gpu"] == gpus


def test_the_image_is_the_official_one_pinned_to_the_planned_release(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    summary = deploy(capsys, tmp_path, "--target", "k8s", "--vllm-version", "0.10.1")
    assert summary["plan"]["vllm_version"] == "0.10.1"
    assert container(_vllm_deployments(tmp_path)[0])["image"] == "vllm/vllm-openai:v0.10.1"


def test_the_gateway_reaches_every_replica_by_a_name_the_headless_service_resolves(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deploy(capsys, tmp_path, "--replicas", "3", "--target", "k8s")
    vllm_docs = documents(tmp_path / "vllm.yaml")
    (headless,) = by_kind(vllm_docs, "Service")
    assert headless["spec"]["clusterIP"] == "None"
    deployments = by_kind(vllm_docs, "Deployment")
    for deployment in deployments:
        pod = deployment["spec"]["template"]
        assert pod["spec"]["subdomain"] == headless["metadata"]["name"]
        selector = headless["spec"]["selector"]
        assert selector.items() <= pod["metadata"]["labels"].items()
        port = container(deployment)["ports"][0]["containerPort"]
        # deleted, a replica keeps serving until the gateways have stopped sending it requests
        drain_s = int(container(deployment)["lifecycle"]["preStop"]["exec"]["command"][1])
        assert drain_s >= 35 and pod["spec"]["terminationGracePeriodSeconds"] > drain_s
    (gateway,) = by_kind(documents(tmp_path / "gateway.yaml"), "Deployment")
    args = container(gateway)["args"]
    assert len(deployments) == 3 and "--upstream" not in args
    # the headless Service's name lists every ready replica: those added later are found too
    assert args[args.index("--upstream-dns") + 1] == f"{headless['metadata']['name']}:{port}"
    assert headless["spec"]["ports"][0]["port"] == port


def test_the_gateway_has_two_pods_a_disruption_budget_and_sessions_in_the_aof_redis(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deploy(capsys, tmp_path, "--target", "k8s")
    gateway_docs = documents(tmp_path / "gateway.yaml")
    (gateway,) = by_kind(gateway_docs, "Deployment")
    (budget,) = by_kind(gateway_docs, "PodDisruptionBudget")
    assert gateway["spec"]["replicas"] >= 2
    assert budget["spec"]["minAvailable"] >= 1
    pod_labels = gateway["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    args = container(gateway)["args"]
    store = args[args.index("--session-store") + 1]
    budget_store = args[args.index("--admission-store") + 1]
    redis_docs = documents(tmp_path / "redis.yaml")
    (redis_service,) = by_kind(redis_docs, "Service")
    port = redis_service["spec"]["ports"][0]["port"]
    # sessions and the one KV budget the pods share, in two databases of that Redis
    assert store == f"redis://{redis_service['metadata']['name']}:{port}/0"
    assert budget_store == f"redis://{redis_service['metadata']['name']}:{port}/1"
    redis = container(by_kind(redis_docs, "Deployment")[0])
    words = " ".join([*redis.get("command", []), *redis["args"]])
    assert "--appendonly yes" in words and "--appendfsync everysec" in words
    claim = by_kind(redis_docs, "PersistentVolumeClaim")[0]["metadata"]["name"]
    volumes = by_kind(redis_docs, "Deployment")[0]["spec"]["template"]["spec"]["volumes"]
    assert [v["persistentVolumeClaim"]["claimName"] for v in volumes] == [claim]


def test_the_gateway_plans_the_same_budget_without_the_unmodelled_engine_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pasted = ["--", "vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192"]
    pasted += ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    deploy(capsys, tmp_path, "--target", "k8s", *pasted, model=None)
    vllm_args = container(_vllm_deployments(tmp_path)[0])["args"]
    tools = vllm_args.index("--enable-auto-tool-choice")
    assert vllm_args[tools : tools + 3] == [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ]
    assert vllm_args[vllm_args.index("--max-model-len") + 1] == "8192"
    (gateway,) = by_kind(documents(tmp_path / "gateway.yaml"), "Deployment")
    gateway_args = container(gateway)["args"]
    assert gateway_args[gateway_args.index("--max-model-len") + 1] == "8192"
    assert "--enable-auto-tool-choice" not in gateway_args


def test_the_hf_token_is_a_secret_reference_never_a_value(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deploy(capsys, tmp_path, "--target", "k8s")
    assert not by_kind(_all_docs(tmp_path), "Secret")
    env = {e["name"]: e for e in container(_vllm_deployments(tmp_path)[0])["env"]}
    assert "value" not in env["HF_TOKEN"]
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"]


def test_shm_is_memory_and_the_model_cache_a_claim_of_its_own(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deploy(capsys, tmp_path, "--replicas", "2", "--target", "k8s")
    docs = documents(tmp_path / "vllm.yaml")
    claims = {c["metadata"]["name"] for c in by_kind(docs, "PersistentVolumeClaim")}
    used = set()
    for deployment in by_kind(docs, "Deployment"):
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in container(deployment)["volumeMounts"]}
        assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
        cache = [v for v in volumes.values() if "persistentVolumeClaim" in v]
        used |= {v["persistentVolumeClaim"]["claimName"] for v in cache}
        # a 7.6 B-parameter bf16 checkpoint is 15.2 GB: the claim must hold it
        storage = by_kind(docs, "PersistentVolumeClaim")[0]["spec"]["resources"]["requests"]
        assert int(storage["storage"].removesuffix("Gi")) * 2**30 >= 15.2e9
    assert used == claims and len(claims) == 2
