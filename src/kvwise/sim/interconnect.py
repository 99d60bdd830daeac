"""The links between GPUs, and what tensor and pipeline parallelism spend on them per step.

A replica spans `tensor_parallel_size x pipeline_parallel_size` GPUs, placed node by node:
tensor-parallel ranks inside one node when they fit (over the node's GPU link: PCIe or NVLink),
pipeline stages filling a node before the next (a stage boundary between nodes crosses the
network: Ethernet or InfiniBand).

Tensor parallelism: two all-reduces per layer (after attention, after the MLP). A ring
all-reduce of a message of B bytes over n GPUs takes

    2 (n - 1) / n x B / link bandwidth  +  2 (n - 1) x hop latency

(n - 1 reduce-scatter and n - 1 all-gather steps; Patarasuk & Yuan, "Bandwidth optimal
all-reduce algorithms for clusters of workstations", JPDC 2009; NCCL's ring model,
src/graph/tuning.cc). `steptime.step_cost` keeps the bandwidth term as a fitted basis term; the
fitted per-call overhead (`allreduce_call_s`) was measured on each card's own link, so only the
latency a slower link adds on top is charged here.

Pipeline parallelism: each stage boundary sends the step's activations to the next stage
(hidden states and the residual, 2 x hidden x dtype bytes per token: vLLM's
`IntermediateTensors` in vllm/model_executor/models/llama.py, qwen2.py). vLLM V1 keeps up to
`pipeline_parallel_size` batches in flight, but a request's next token waits for its previous
one to leave the last stage: each request sees every stage in turn (the pipeline bubble), which
the simulator models by running the stages one after another. With memory-bound decode a stage
takes about as long for one batch as for a slice of it, so throughput is close either way.

GPUs without peer-to-peer (`pcie-nop2p`): PCIe cards whose platform does not let one GPU reach
the other's memory (vLLM logs "Custom allreduce is disabled because your platform lacks GPU P2P
capability or P2P test failed": vllm/distributed/device_communicators/custom_all_reduce.py,
CustomAllreduce.__init__, `_can_p2p`, 0.4-0.11; also off with --disable-custom-all-reduce, and
for more than two PCIe GPUs). Every all-reduce then goes to NCCL (pynccl.py; still captured in
the CUDA graphs), and NCCL, with no P2P transport, moves the data through host memory (its SHM
transport: "SHM is used between devices when peer-to-peer cannot happen, therefore, host memory
is used", NCCL docs, NCCL_SHM_DISABLE). The fitted all-reduce terms were measured on links with
P2P or NVLink, so on this link they are replaced, not extended, by NCCL's own cost model with a
measured bandwidth (`nccl_shm_allreduce`): per all-reduce of B bytes over n GPUs, the faster of

    LL      6.6 us + 2 (n - 1) x 1.0 us  +  2 (n - 1) / n x B / (busbw / 4)
    Simple  8.4 us + 2 (n - 1) x 5.7 us  +  2 (n - 1) / n x B / busbw

(NCCL src/graph/tuning.cc, 2.18+: baseLat Ring {LL 6.6, Simple 8.4} us, hwLat PCI Ring {LL 1.0,
Simple 5.7} us; ring LL all-reduce runs at a quarter of the bus bandwidth, as NCCL's tuning
model charges it; LL128 is enabled on NVLink only), with busbw the nccl-tests all-reduce bus
bandwidth through host memory: 5.2 GB/s on A100s with NCCL_P2P_DISABLE=1 (PCIe 4.0, NCCL 2.16,
1-8 GB messages; github.com/eugenesiow/LLM-Insights, infrastructure/hardware/README.md), the
same order as NCCL's own report of 3.9 GB/s on PCIe 3.0 with one channel (NVIDIA/nccl#384).
Per step there are 2 x layers + 1 of them (the vocabulary-parallel embedding all-reduces its
output too: vllm/model_executor/layers/vocab_parallel_embedding.py), and the logits of every
scheduled request are all-gathered across the ranks before sampling (vocab / n x 2 bytes from
each rank: LogitsProcessor._gather_logits, all-gather on V1), outside the CUDA graphs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvwise.core.gpus import GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.errors import UsageError

# One ring step's latency by link kind, NCCL's own tuning model (LL protocol, ring algorithm):
# hwLat[NVLINK|PCI|NET][RING][LL] in src/graph/tuning.cc, NCCL 2.18-2.23 (github.com/NVIDIA/nccl).
# "shm" has no class of its own: ncclTopoTuneModel charges every intra-node path that is not
# NVLink as PCI (`intraHw[a] = graphs[a]->typeIntra == LINK_NVL ? NCCL_HW_NVLINK : NCCL_HW_PCI`)
HOP_LATENCY_S = {"nvlink": 0.6e-6, "pci": 1.0e-6, "net": 2.7e-6, "shm": 1.0e-6}
# NCCL's ring all-reduce cost model for the two protocols it runs over PCIe (tuning.cc, 2.18+):
# base latency, latency per ring step on PCI, and the share of the bus bandwidth reached
NCCL_RING_LL = (6.6e-6, 1.0e-6, 1 / 4)
NCCL_RING_SIMPLE = (8.4e-6, 5.7e-6, 1.0)
# nccl-tests all_reduce_perf bus bandwidth with NCCL_P2P_DISABLE=1 on A100s (SHM transport over
# PCIe 4.0): 5.20 GB/s at 1-8 GB (github.com/eugenesiow/LLM-Insights,
# infrastructure/hardware/README.md, NCCL 2.16.2)
SHM_ALLREDUCE_BUSBW = 5.2e9
# the card's catalog link counts as NVLink-class from this bandwidth on (as the planner does)
NVLINK_MIN_BYTES_S = 100e9


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth_bytes_s: float  # per direction
    kind: str  # "nvlink", "pci", "net", or "shm" (PCIe without P2P: NCCL via host memory)
    source: str

    @property
    def hop_latency_s(self) -> float:
        return HOP_LATENCY_S[self.kind]


_PCIE = "PCI-SIG base specification: {} GT/s x 16 lanes, 128b/130b encoding, per direction"
_NVLINK = "NVIDIA datasheet: {} GB/s total GPU-to-GPU NVLink bandwidth, half per direction"
LINKS: dict[str, Link] = {
    "pcie3": Link("PCIe 3.0 x16", 15.75e9, "pci", _PCIE.format(8)),
    "pcie4": Link("PCIe 4.0 x16", 31.5e9, "pci", _PCIE.format(16)),
    "pcie5": Link("PCIe 5.0 x16", 63.0e9, "pci", _PCIE.format(32)),
    # bandwidth: NCCL's all-reduce bus bandwidth through host memory, measured (see above)
    "pcie-nop2p": Link(
        "PCIe without GPU peer-to-peer (NCCL through host memory)",
        SHM_ALLREDUCE_BUSBW,
        "shm",
        "nccl-tests all_reduce_perf busbw with NCCL_P2P_DISABLE=1, A100 PCIe 4.0 "
        "(github.com/eugenesiow/LLM-Insights)",
    ),
    # https://www.nvidia.com/en-us/design-visualization/nvlink-bridges/ (RTX A6000, 3090)
    "nvlink-bridge": Link("NVLink bridge", 56.25e9, "nvlink", _NVLINK.format(112.5)),
    # https://www.nvidia.com/en-us/data-center/a100/ (SXM4)
    "nvlink3": Link("NVLink 3 (A100 SXM)", 300e9, "nvlink", _NVLINK.format(600)),
    # https://www.nvidia.com/en-us/data-center/h100/ (SXM5)
    "nvlink4": Link("NVLink 4 (H100 SXM)", 450e9, "nvlink", _NVLINK.format(900)),
    # https://www.nvidia.com/en-us/data-center/dgx-b200/
    "nvlink5": Link("NVLink 5 (B200)", 900e9, "nvlink", _NVLINK.format(1800)),
    "ethernet-10g": Link("10 GbE", 1.25e9, "net", "IEEE 802.3: 10 Gb/s line rate"),
    "ethernet-25g": Link("25 GbE", 3.125e9, "net", "IEEE 802.3by: 25 Gb/s line rate"),
    "ethernet-100g": Link("100 GbE", 12.5e9, "net", "IEEE 802.3: 100 Gb/s line rate"),
    "ethernet-400g": Link("400 GbE", 50e9, "net", "IEEE 802.3bs: 400 Gb/s line rate"),
    # InfiniBand Trade Association roadmap: HDR 200 Gb/s, NDR 400 Gb/s per 4x port
    "infiniband-hdr": Link("InfiniBand HDR", 25e9, "net", "IBTA: HDR 200 Gb/s per port"),
    "infiniband-ndr": Link("InfiniBand NDR", 50e9, "net", "IBTA: NDR 400 Gb/s per port"),
}
# Short names a user types for the family's usual member
ALIASES = {"pcie": "pcie4", "nop2p": "pcie-nop2p", "nvlink": "nvlink4", "ethernet":
           "ethernet-100g", "infiniband": "infiniband-ndr", "ib": "infiniband-ndr"}  # fmt: skip


def find_link(name: str) -> Link:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in LINKS:
        choices = ", ".join([*LINKS, *ALIASES])
        raise UsageError(f"unknown interconnect {name!r}; choose one of: {choices}")
    return LINKS[key]


def gpu_link(gpu: GpuSpec) -> Link:
    """The card's own GPU-to-GPU link, as the GPU catalog gives it (data/gpus.json)."""
    kind = "nvlink" if gpu.interconnect_bytes_s >= NVLINK_MIN_BYTES_S else "pci"
    name = f"{gpu.name}'s own link, {gpu.interconnect_bytes_s / 1e9:g} GB/s"
    return Link(name, gpu.interconnect_bytes_s, kind, "kvwise/core/data/gpus.json")


def default_network(gpu: GpuSpec) -> Link:
    """Between nodes, by GPU class: NVLink servers come with one InfiniBand NDR port per GPU
    (DGX H100: 8 x ConnectX-7 400 Gb/s, docs.nvidia.com/dgx/dgxh100-user-guide); other
    data-centre cards with 100 GbE; GeForce workstations with 10 GbE."""
    if gpu.interconnect_bytes_s >= NVLINK_MIN_BYTES_S:
        return LINKS["infiniband-ndr"]
    if re.search(r"\bRTX \d{4}\b|GEFORCE|TITAN", gpu.name.upper()):  # as the planner tells
        return LINKS["ethernet-10g"]
    return LINKS["ethernet-100g"]


@dataclass(frozen=True)
class Topology:
    """The machines: `nodes` x `gpus_per_node`, the link inside a node and between nodes
    (None: the GPU class's default)."""

    nodes: int = 1
    gpus_per_node: int = 1
    intra_node: Link | None = None
    inter_node: Link | None = None

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def links(self, gpu: GpuSpec) -> tuple[Link, Link]:
        return (self.intra_node or gpu_link(gpu), self.inter_node or default_network(gpu))

    def describe(self, gpu: GpuSpec) -> str:
        intra, inter = self.links(gpu)
        text = f"{self.nodes} x {self.gpus_per_node} {gpu.name} ({intra.name}"
        return text + (f"; {inter.name} between nodes)" if self.nodes > 1 else ")")


@dataclass(frozen=True)
class NcclShmAllReduce:
    """Tensor-parallel collectives through host memory (module docstring), per step:
    `calls` all-reduces, each min(LL, Simple) of latency + tokens x seconds per token, plus
    the all-gather of the sampled logits (one call, bytes per scheduled request)."""

    calls: int
    ll_latency_s: float
    ll_s_per_token: float
    simple_latency_s: float
    simple_s_per_token: float
    gather_latency_s: float
    gather_s_per_request: float


def nccl_shm_collectives(model: ModelSpec, tp: int, busbw_bytes_s: float) -> NcclShmAllReduce:
    ring_factor = 2 * (tp - 1) / tp  # bytes through each link per byte all-reduced
    message_bytes_per_token = model.hidden_size * model.dtype_bytes
    ll_base_s, ll_hop_s, ll_share = NCCL_RING_LL
    simple_base_s, simple_hop_s, _ = NCCL_RING_SIMPLE
    ring_steps = 2 * (tp - 1)
    simple_latency_s = simple_base_s + ring_steps * simple_hop_s
    # all-gather: each rank receives the other ranks' vocab / tp logits per request
    gather_bytes_per_request = (tp - 1) / tp * model.vocab_size * model.dtype_bytes
    return NcclShmAllReduce(
        calls=2 * model.num_layers + 1,  # after attention, after the MLP; the embedding
        ll_latency_s=ll_base_s + ring_steps * ll_hop_s,
        ll_s_per_token=ring_factor * message_bytes_per_token / (busbw_bytes_s * ll_share),
        simple_latency_s=simple_latency_s,
        simple_s_per_token=ring_factor * message_bytes_per_token / busbw_bytes_s,
        gather_latency_s=simple_latency_s,
        gather_s_per_request=gather_bytes_per_request / busbw_bytes_s,
    )


@dataclass(frozen=True)
class CommCost:
    """What a replica's parallelism adds to each step, beyond the fitted per-card terms."""

    allreduce_bytes_s: float  # the slowest link of the tensor-parallel ring
    fixed_s: float  # per step: extra all-reduce latency of that link, pipeline hops
    s_per_token: float  # per token in the step: activations sent across stage boundaries
    tp_link: Link
    pp_links: tuple[Link, ...]  # one per stage boundary
    # tensor parallelism without GPU peer-to-peer: NCCL through host memory, in place of the
    # fitted all-reduce terms (None: the fitted terms, on `allreduce_bytes_s`)
    shm: NcclShmAllReduce | None = None


def comm_cost(model: ModelSpec, gpu: GpuSpec, topology: Topology, tp: int, pp: int) -> CommCost:
    intra, inter = topology.links(gpu)
    if tp * pp > topology.num_gpus:
        raise UsageError(f"TP {tp} x PP {pp} needs {tp * pp} GPUs; the topology has "
                         f"{topology.num_gpus}")  # fmt: skip
    tp_link = intra if tp <= topology.gpus_per_node else inter
    shm = None
    ring_latency_s = 0.0
    if tp > 1 and tp_link.kind == "shm":
        shm = nccl_shm_collectives(model, tp, tp_link.bandwidth_bytes_s)
    else:
        # the card's own link is what the fitted per-call overhead was measured on
        extra_hop_s = max(0.0, tp_link.hop_latency_s - gpu_link(gpu).hop_latency_s)
        allreduce_calls = 2 * model.num_layers if tp > 1 else 0  # after attention, after the MLP
        ring_latency_s = allreduce_calls * 2 * (tp - 1) * extra_hop_s
    stages_per_node = max(1, topology.gpus_per_node // tp)
    # boundary i sits between stage i and i + 1: across nodes when a node is full there
    pp_links = tuple(inter if (i + 1) % stages_per_node == 0 else intra for i in range(pp - 1))
    activation_bytes_per_token = 2 * model.hidden_size * model.dtype_bytes  # hidden + residual
    return CommCost(
        allreduce_bytes_s=tp_link.bandwidth_bytes_s,
        fixed_s=ring_latency_s + sum(link.hop_latency_s for link in pp_links),
        s_per_token=sum(activation_bytes_per_token / link.bandwidth_bytes_s for link in pp_links),
        tp_link=tp_link,
        pp_links=pp_links,
        shm=shm,
    )
