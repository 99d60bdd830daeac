"""Links between GPUs in the step time: tensor-parallel all-reduces and pipeline stage hops."""

from __future__ import annotations

import pytest

from kvwise.cli import main
from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.sim.deploy import deployment
from kvwise.sim.interconnect import LINKS, Topology, comm_cost, default_network, find_link
from kvwise.sim.steptime import step_weights

QWEN7 = "Qwen/Qwen2.5-7B-Instruct"  # 28 layers, hidden 3584, bf16


def _decode_step_s(topology: Topology, flags: VllmFlags, batch: int = 32) -> float:
    """One decode step of `batch` requests at 1,000 tokens of context each."""
    dep = deployment(load_model(QWEN7), find_gpu("rtx4090"), flags, topology=topology)
    weights = step_weights(dep.config.cost, dep.config.coefficients)
    return weights.step_s(batch, 0, batch * 1000, batch)


def test_tensor_parallel_over_pcie_is_slower_per_token_than_over_nvlink() -> None:
    tp2 = VllmFlags(tensor_parallel_size=2)
    pcie = _decode_step_s(Topology(1, 2, find_link("pcie4")), tp2)
    nvlink = _decode_step_s(Topology(1, 2, find_link("nvlink-bridge")), tp2)
    # all-reduce bytes per token: 2 per layer x 28 x 3584 x 2 bytes x ring factor 2 (2-1)/2 = 1,
    # 401 kB: 12.7 us at 31.5 GB/s, 7.1 us at 56.25 GB/s, times 32 tokens, times the fitted
    # all-reduce efficiency (> 1) of the RTX 4090 TP>1 set
    difference_s = 32 * 2 * 28 * 3584 * 2 * (1 / 31.5e9 - 1 / 56.25e9)
    assert pcie - nvlink > difference_s
    # the PCIe link adds its extra hop latency over the catalog's PCIe card: none
    assert comm_cost(load_model(QWEN7), find_gpu("rtx4090"), Topology(1, 2), 2, 1).fixed_s == 0


def test_a_slower_link_adds_ring_latency_per_all_reduce() -> None:
    model, h100 = load_model(QWEN7), find_gpu("h100 sxm")
    over_nvlink = comm_cost(model, h100, Topology(1, 8), 8, 1)
    over_pcie = comm_cost(model, h100, Topology(1, 8, find_link("pcie5")), 8, 1)
    assert over_nvlink.fixed_s == 0  # the fitted per-call overhead was measured on NVLink
    # 56 all-reduces x 2 (8 - 1) ring steps x (1.0 - 0.6) us more per step over PCIe
    assert over_pcie.fixed_s == pytest.approx(56 * 14 * 0.4e-6)
    assert over_pcie.allreduce_bytes_s == 63e9


def test_pipeline_stages_on_two_nodes_send_activations_over_the_network() -> None:
    model, gpu = load_model(QWEN7), find_gpu("rtx4090")
    ten_gbe = comm_cost(model, gpu, Topology(2, 1, inter_node=find_link("ethernet-10g")), 1, 2)
    ndr = comm_cost(model, gpu, Topology(2, 1, inter_node=find_link("infiniband-ndr")), 1, 2)
    # hidden states and residual: 2 x 3584 x 2 bytes per token, one boundary
    assert ten_gbe.s_per_token == pytest.approx(2 * 3584 * 2 / 1.25e9)
    assert ndr.s_per_token == pytest.approx(2 * 3584 * 2 / 50e9)
    assert ten_gbe.fixed_s == pytest.approx(2.7e-6)  # one network hop
    pp2 = VllmFlags(pipeline_parallel_size=2)
    slow = _decode_step_s(Topology(2, 1, inter_node=LINKS["ethernet-10g"]), pp2, batch=256)
    fast = _decode_step_s(Topology(2, 1, inter_node=LINKS["infiniband-ndr"]), pp2, batch=256)
    assert slow - fast == pytest.approx(256 * 2 * 3584 * 2 * (1 / 1.25e9 - 1 / 50e9))


def test_stages_inside_one_node_stay_on_the_gpu_link() -> None:
    model, gpu = load_model(QWEN7), find_gpu("rtx4090")
    cost = comm_cost(model, gpu, Topology(2, 4), 2, 2)  # both stages fit on the first node
    assert [link.kind for link in cost.pp_links] == ["pci"]
    spread = comm_cost(model, gpu, Topology(2, 4), 4, 2)  # a stage per node
    assert [link.kind for link in spread.pp_links] == ["net"]


def test_network_defaults_follow_the_gpu_class() -> None:
    assert default_network(find_gpu("h100 sxm")).name == "InfiniBand NDR"
    assert default_network(find_gpu("rtx4090")).name == "10 GbE"
    assert default_network(find_gpu("l40s")).name == "100 GbE"


def test_a_layout_larger_than_the_machines_is_refused() -> None:
    with pytest.raises(Exception, match="needs 4 GPUs"):
        comm_cost(load_model(QWEN7), find_gpu("rtx4090"), Topology(1, 2), 2, 2)


def test_unknown_link_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", QWEN7, "--gpu", "rtx4090", "-tp", "2", "--interconnect", "warp-drive",
            "--workload", "agent", "--sessions", "2", "--turns", "2"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown interconnect 'warp-drive'" in err and "pcie4" in err and "\n" not in err


# --- GPUs without peer-to-peer: NCCL through host memory --------------------------------------
# Figures the tests restate from their sources: NCCL's ring cost model (src/graph/tuning.cc,
# 2.18+: base latency LL 6.6 us / Simple 8.4 us, 1.0 / 5.7 us per ring step on PCI, LL at a
# quarter of the bus bandwidth) and nccl-tests' 5.2 GB/s all-reduce bus bandwidth through host
# memory on A100s (NCCL_P2P_DISABLE=1)
SHM_BUSBW = 5.2e9
LL_2GPU_S, SIMPLE_2GPU_S = 6.6e-6 + 2 * 1.0e-6, 8.4e-6 + 2 * 5.7e-6
QWEN7_MESSAGE_BYTES = 3584 * 2  # hidden x bf16, per token
QWEN7_CALLS = 2 * 28 + 1  # two per layer, one after the embedding


def _a100_weights(link: str | None, tp: int = 2):  # type: ignore[no-untyped-def]
    flags = VllmFlags(tensor_parallel_size=tp)
    topology = Topology(1, tp, find_link(link)) if link else None
    dep = deployment(load_model(QWEN7), find_gpu("a100 pcie 80gb"), flags, topology=topology)
    return step_weights(dep.config.cost, dep.config.coefficients)


def test_without_p2p_a_decode_step_pays_nccls_host_memory_all_reduces() -> None:
    own, nop2p = _a100_weights(None), _a100_weights("pcie-nop2p")
    # one decode token: small messages go by LL, 57 all-reduces of 7 kB plus the fitted
    # all-reduce terms the card's own link had are gone
    ll_step_s = QWEN7_CALLS * (LL_2GPU_S + QWEN7_MESSAGE_BYTES / (SHM_BUSBW / 4))
    assert nop2p.shm_allreduce_s(1) == pytest.approx(ll_step_s)
    assert nop2p.step_s(1, 0, 1000, 1) > own.step_s(1, 0, 1000, 1) + 0.5 * ll_step_s
    # a 2,048-token prefill chunk: large messages go by Simple, at the full bus bandwidth
    simple_chunk_s = QWEN7_CALLS * (SIMPLE_2GPU_S + 2048 * QWEN7_MESSAGE_BYTES / SHM_BUSBW)
    assert nop2p.shm_allreduce_s(2048) == pytest.approx(simple_chunk_s)
    # every scheduled request's logits are all-gathered: half of a 152k vocabulary in bf16
    vocab = load_model(QWEN7).vocab_size
    assert nop2p.request_s - own.request_s == pytest.approx(vocab / 2 * 2 / SHM_BUSBW)


def test_the_host_memory_path_slows_decode_more_as_the_batch_grows() -> None:
    own, nop2p = _a100_weights(None), _a100_weights("nop2p")
    gaps = [nop2p.step_s(b, 0, b * 1000, b) - own.step_s(b, 0, b * 1000, b) for b in (1, 16, 64)]
    assert gaps[0] < gaps[1] < gaps[2]


def test_one_gpu_has_nothing_to_all_reduce_whatever_the_link() -> None:
    assert _a100_weights("pcie-nop2p", tp=1) == _a100_weights(None, tp=1)


def test_simulate_takes_the_no_p2p_interconnect(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    def run(*extra: str) -> dict[str, float]:
        argv = ["simulate", QWEN7, "--gpu", "a100 pcie 80gb", "-tp", "2", "--workload", "random",
                "--num-prompts", "8", "--input-len", "256", "--output-len", "64",
                "--json", *extra]  # fmt: skip
        assert main(argv) == 0
        return json.loads(capsys.readouterr().out)

    own, nop2p = run(), run("--interconnect", "pcie-nop2p")
    assert nop2p["mean_tpot_ms"] > own["mean_tpot_ms"] * 1.05
    assert nop2p["output_throughput"] < own["output_throughput"]
