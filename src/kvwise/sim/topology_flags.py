"""The hardware flags `kvwise plan --workload` and `kvwise simulate` share: how many nodes, how
many GPUs in each, and the links inside a node and between nodes."""

from __future__ import annotations

import argparse

from kvwise.core.flags import VllmFlags
from kvwise.errors import UsageError
from kvwise.sim.interconnect import LINKS, Topology, find_link


def add_topology_flags(group: argparse._ArgumentGroup) -> None:
    names = ", ".join(LINKS)
    group.add_argument("--nodes", type=int, help="machines (default 1)")
    group.add_argument("--gpus-per-node", type=int, help="GPUs in each machine (default 1)")
    group.add_argument(
        "--interconnect",
        help=f"GPU link inside a node (default: the card's own, from the GPU catalog): {names}. "
        "pcie-nop2p: PCIe GPUs without peer-to-peer, where vLLM logs 'Custom allreduce is "
        "disabled because your platform lacks GPU P2P capability' (NCCL then goes through host "
        "memory)",
    )
    group.add_argument(
        "--inter-node-link",
        help="network between nodes (default by GPU class: InfiniBand NDR for NVLink servers, "
        "100 GbE for other data-centre cards, 10 GbE for GeForce)",
    )


def topology_from_args(args: argparse.Namespace) -> Topology:
    """--nodes / --gpus-per-node, or --num-gpus as that many GPUs on one node."""
    num_gpus = getattr(args, "num_gpus", None)
    if num_gpus is not None and (args.nodes or args.gpus_per_node):
        raise UsageError("give --num-gpus or --nodes/--gpus-per-node, not both")
    nodes = args.nodes or 1
    per_node = args.gpus_per_node or num_gpus or 1
    for flag, value in (("--nodes", nodes), ("--gpus-per-node", per_node)):
        if value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    if num_gpus is not None and num_gpus < 1:
        raise UsageError(f"--num-gpus must be at least 1, got {num_gpus}")
    intra = find_link(args.interconnect) if args.interconnect else None
    inter = find_link(args.inter_node_link) if args.inter_node_link else None
    return Topology(nodes, per_node, intra, inter)


def replica_topology(args: argparse.Namespace, flags: VllmFlags) -> Topology | None:
    """`kvwise simulate` runs one replica: the nodes it spans hold its TP x PP GPUs (spread
    evenly unless --gpus-per-node says); None when no flag names the hardware."""
    if not any((args.nodes, args.gpus_per_node, args.interconnect, args.inter_node_link)):
        return None
    ranks = (flags.tensor_parallel_size or 1) * (flags.pipeline_parallel_size or 1)
    nodes = args.nodes or 1
    given = argparse.Namespace(**{**vars(args), "num_gpus": None,
                                  "gpus_per_node": args.gpus_per_node or -(-ranks // nodes)})  # fmt: skip
    return topology_from_args(given)
