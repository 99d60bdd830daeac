"""The SGLang replica `kvwise plan --workload ... --engine vllm,sglang` simulates: the release
picks the scheduler's default policy (SGLang's server_args.py: "lpm" before 0.4.4, "fcfs" from
it)."""

from __future__ import annotations

import pytest

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import resolve_gpu
from kvwise.planner.sglang import SglangFlags
from kvwise.sim.sglang_deploy import sglang_deployment


@pytest.mark.parametrize(
    ("version", "policy"),
    [("0.4.0", "lpm"), ("v0.4.3.post2", "lpm"), ("0.4.6.post1", "fcfs"), (None, "fcfs")],
)
def test_the_release_picks_the_default_schedule_policy(version: str | None, policy: str) -> None:
    model = load_model("Qwen/Qwen2.5-7B-Instruct")
    gpu = resolve_gpu("h100-sxm", None, detect=False)
    deployed = sglang_deployment(model, gpu, VllmFlags(), SglangFlags(version=version))
    assert deployed.schedule_policy == policy
