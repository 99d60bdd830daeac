"""`kvwise bench`'s agent sessions through the gateway's cost routing, on the REAL vLLM CPU engine.

What a user would notice: every turn is answered; the gateway sees one session per bench
session (the driver's `X-Session-Id`: admission's fairness flows are the sessions); and the cost
router timed every first token the engine gave, so it routes by this engine's speed, not by the
prior it started from.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest

from kvwise.bench.driver import Target, run_workload
from kvwise.bench.prompts import LocalTokenizer, SegmentTexts
from kvwise.gateway.cost_routing import PRIOR, CostRouter
from kvwise.sim.workloads import WorkloadSpec, build_workload
from tests.engine_fixture import SERVED_MODEL_NAME, EngineProcess, tiny_model_dir
from tests.gateway.servers import make_config, running_gateway

pytestmark = pytest.mark.engine


def test_bench_sessions_are_sessions_at_the_gateway_and_time_its_router(
    vllm_engine: EngineProcess,
) -> None:
    config = make_config(
        [vllm_engine.url, vllm_engine.url], tokenizer_path=str(tiny_model_dir()), routing="cost"
    )
    spec = WorkloadSpec(
        kind="agent", sessions=4, turns=3, system_prompt_tokens=200, tool_output_tokens=100,
        user_tokens=40, output_len=8, think_time_s=0.0,
    )  # fmt: skip
    workload = build_workload(spec, random.Random(7))
    texts = SegmentTexts(LocalTokenizer(tiny_model_dir() / "tokenizer.json"), 7)
    with running_gateway(config) as gw:
        records = asyncio.run(run_workload(Target(gw.url, SERVED_MODEL_NAME), workload, texts))
        router = gw.gateway.admission.router
        flows = Counter(gw.gateway.admission.admitted_flows)
    assert [r.error for r in records if not r.is_ok] == []
    assert len(records) == 12
    assert all(flow.startswith("session:") for flow in flows)
    assert sorted(flows.values()) == [3, 3, 3, 3]
    assert isinstance(router, CostRouter)
    assert router.model.num_measurements == 12
    assert router.model.coefficients != PRIOR
