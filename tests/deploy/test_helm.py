"""`kvwise deploy --target helm`: values the production-stack chart's own schema accepts with
unknown keys rejected, one replica group per replica with the plan's flags, the router off."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy.helpers import (
    K8S_VERSION,
    assert_each_flag_once,
    deploy,
    expected_flag_values,
    plan_flags,
)

SCHEMA = Path(__file__).parents[1] / "data" / "deploy" / "vllm-stack-0.1.12.values.schema.json"
# vllmConfig key -> the flag the chart writes for it (helm/templates/deployment-vllm-multi.yaml
# of production-stack at the commit in tests/data/deploy/SOURCE.md)
CHART_FLAGS = {
    "maxModelLen": "--max-model-len",
    "dtype": "--dtype",
    "tensorParallelSize": "--tensor-parallel-size",
    "maxNumSeqs": "--max-num-seqs",
    "gpuMemoryUtilization": "--gpu-memory-utilization",
}


def strict(schema: Any) -> Any:
    """The chart's schema with `additionalProperties: false` on every object that lists its
    properties and says nothing about others (the chart's own schema lets typos through)."""
    if isinstance(schema, dict):
        schema = {key: strict(value) for key, value in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    return schema


def _validator() -> jsonschema.protocols.Validator:
    schema = strict(json.loads(SCHEMA.read_text()))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _values(out: Path) -> dict[str, Any]:
    return dict(yaml.safe_load((out / "values.yaml").read_text()))


def _engine_args(model_spec: dict[str, Any]) -> list[str]:
    """What the chart's template passes vLLM for these values (the planned flags part)."""
    config = model_spec["vllmConfig"]
    args = []
    for key, flag in CHART_FLAGS.items():
        if key in config:
            args += [flag, str(config[key])]
    return args + list(config.get("extraArgs", []))


@pytest.mark.parametrize("extra", [[], ["--tensor-parallel-size", "2"]], ids=["tp1", "tp2"])
def test_values_pass_the_charts_schema_with_unknown_keys_rejected(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str]
) -> None:
    deploy(capsys, tmp_path, "--replicas", "2", "--target", "helm", *extra)
    values = _values(tmp_path)
    errors = [e.message for e in _validator().iter_errors(values)]
    assert errors == []
    misspelt = copy.deepcopy(values)
    misspelt["servingEngineSpec"]["modelSpec"][0]["vllmConfig"]["maxModelLength"] = 8192
    assert not _validator().is_valid(misspelt)


def test_each_replica_group_carries_the_plans_flags_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    extra = ["--tensor-parallel-size", "2", "--max-num-seqs", "64"]
    flags = plan_flags(capsys, *extra)
    release = _plan_release(capsys)
    deploy(capsys, tmp_path, "--replicas", "2", "--target", "helm", *extra)
    groups = _values(tmp_path)["servingEngineSpec"]["modelSpec"]
    assert len(groups) == 2
    for group in groups:
        assert group["replicaCount"] == 1
        assert group["requestGPU"] == 2
        assert group["tag"] == f"v{release}"
        assert group["vllmConfig"]["enablePrefixCaching"] is flags["enable_prefix_caching"]
        assert_each_flag_once(_engine_args(group), expected_flag_values(flags))


def _plan_release(capsys: pytest.CaptureFixture[str]) -> str:
    from kvwise.cli import main

    main(["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--json"])
    return str(json.loads(capsys.readouterr().out)["vllm_version"])


def test_router_off_and_gateway_and_redis_as_valid_extra_objects(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deploy(capsys, tmp_path, "--replicas", "2", "--target", "helm")
    values = _values(tmp_path)
    assert values["routerSpec"]["enableRouter"] is False
    objects = values["extraObjects"]
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    (gateway,) = [
        o for o in objects if o["kind"] == "Deployment" and "gateway" in o["metadata"]["name"]
    ]
    args = gateway["spec"]["template"]["spec"]["containers"][0]["args"]
    upstreams = [args[i + 1] for i, word in enumerate(args) if word == "--upstream"]
    # the chart names each group's Service <release>-<group>-engine-service (service-vllm.yaml)
    release = "vllm"
    groups = values["servingEngineSpec"]["modelSpec"]
    port = values["servingEngineSpec"]["servicePort"]
    assert upstreams == [f"http://{release}-{g['name']}-engine-service:{port}" for g in groups]
    assert any(o["kind"] == "PodDisruptionBudget" for o in objects)
    redis = [o for o in objects if o["kind"] == "Deployment" and "redis" in o["metadata"]["name"]]
    assert "--appendonly" in redis[0]["spec"]["template"]["spec"]["containers"][0]["args"]


def test_check_jsonschema_accepts_the_values_file_as_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deploy(capsys, tmp_path / "out", "--replicas", "2", "--target", "helm")
    schema = tmp_path / "strict.schema.json"
    schema.write_text(json.dumps(strict(json.loads(SCHEMA.read_text()))))
    argv = ["--schemafile", str(schema), str(tmp_path / "out" / "values.yaml")]
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", *argv], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
