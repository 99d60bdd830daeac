"""--enforce-eager trades decode speed for KV: both sides must show in a simulation."""

from __future__ import annotations

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.sim.deploy import deployment
from kvwise.sim.runner import simulate
from kvwise.sim.workloads import WorkloadSpec


def test_eager_decodes_slower_but_gets_the_graph_memory_as_kv() -> None:
    model, gpu = load_model("Qwen/Qwen2.5-7B-Instruct"), find_gpu("rtx4090")
    spec = WorkloadSpec(
        kind="random", num_prompts=40, input_len=512, output_len=128, max_concurrency=8
    )
    graphs = deployment(model, gpu, VllmFlags())
    eager = deployment(model, gpu, VllmFlags(enforce_eager=True))
    assert eager.plan.kv.tokens > graphs.plan.kv.tokens
    tpot_graphs = simulate(graphs.config, spec, 0).metrics["mean_tpot_ms"]
    tpot_eager = simulate(eager.config, spec, 0).metrics["mean_tpot_ms"]
    assert tpot_eager > tpot_graphs * 1.03
