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
