"""What SGLang allocates at start-up outside the static pool, and whether it fits.

mem_fraction_static covers weights + KV pool; after the pool SGLang allocates the request-to-token
table (model_runner.py init_memory_pool), the attention backend's buffers and the CUDA graphs
(init_attention_backend, then the graph capture). The table is exact from the source; the backend
and graph terms are SGLang's own estimate of them (server_args.py _handle_gpu_memory_settings,
0.5.3+). When they exceed (1 - mem_fraction_static) x free memory, the capture runs out of memory
and SGLang exits with its "Capture cuda graph failed" message. The first full prefill chunk and
a vision encoder run later, on a large or image request, so they are a warning, not a start
verdict (plan.py). Cited in core/data/sglang_versions.json "outside_pool" and docs/sglang_rules.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvwise.planner.sglang.fraction import FractionInputs, piecewise_sizes
from kvwise.planner.sglang.releases import (
    MIB,
    SglangRelease,
    outside_pool_constants,
    reserve_constants,
)


@dataclass(frozen=True)
class OutsideNeed:
    """Bytes SGLang allocates at start-up after the KV pool, by term."""

    req_to_token: int
    attention: int
    graphs: int  # per-batch-size graph buffers, up to cuda_graph_max_bs
    piecewise: int  # 0.5.10+: piecewise graphs up to chunked_prefill_size

    @property
    def at_start(self) -> int:
        return self.req_to_token + self.attention + self.graphs + self.piecewise


def request_slots(
    release: SglangRelease, tokens: int, context: int, max_running: int | None
) -> int:
    """Rows of ReqToTokenPool: the user's --max-running-requests, else the release's request-pool
    size (int(tokens / context x scale) clamped, as pool.max_running_requests), + 1 row."""
    if max_running is not None:
        return max_running + 1
    if "req_table_scale" in release.data:  # 0.1.x: its own scale, no floor or cap
        return int(tokens / context * release.data["req_table_scale"])
    spec = release.data.get("max_running", {"scale": 512, "floor": 2048, "cap": 4096})
    size = int(tokens / context * spec["scale"])
    if spec["floor"] is not None:
        size = max(size, spec["floor"])
    if spec["cap"] is not None:
        size = min(size, spec["cap"])
    return size + 1


def graph_bytes(release: SglangRelease, inputs: FractionInputs) -> tuple[int, int]:
    """(graph buffers, piecewise graphs) in SGLang's own estimate; nothing without graphs."""
    if inputs.cuda_graph_max_bs <= 0:
        return 0, 0
    const = reserve_constants()
    graphs = inputs.cuda_graph_max_bs * const["per_graph_bs_mib"] * MIB
    piecewise = 0
    if release.data.get("piecewise_graphs_by_default"):
        if inputs.is_mla:
            piecewise = release.data["piecewise_mla_reserve_mib"] * MIB
        else:
            sizes = piecewise_sizes(inputs.chunked_prefill_size)
            piecewise = sizes * const["per_piecewise_size_mib"] * MIB
    return int(graphs), int(piecewise)


def outside_need(
    release: SglangRelease,
    inputs: FractionInputs,
    tokens: int,
    context: int,
    max_running: int | None,
) -> OutsideNeed:
    const = outside_pool_constants()
    rows = request_slots(release, tokens, context, max_running)
    extra = release.data.get("req_table_extra_context", const["req_to_token_extra_context"])
    table = rows * (context + extra)
    graphs, piecewise = graph_bytes(release, inputs)
    return OutsideNeed(
        table * const["req_to_token_bytes_per_entry"],
        const["attention_constant_mib"] * MIB,
        graphs,
        piecewise,
    )


@dataclass(frozen=True)
class OutsideFix:
    """Flag changes that each make start-up fit (None: that change alone does not)."""

    mem_fraction_static: float | None = None
    cuda_graph_max_bs: int | None = None
    context_length: int | None = None

    def flags(self) -> str | None:
        parts = [
            f"--mem-fraction-static {self.mem_fraction_static:.2f}"
            if self.mem_fraction_static is not None
            else "",
            f"--cuda-graph-max-bs {self.cuda_graph_max_bs}" if self.cuda_graph_max_bs else "",
            f"--context-length {self.context_length}" if self.context_length else "",
        ]
        return " or ".join(p for p in parts if p) or None


def largest_fraction(free: int, need: int, scale: float = 1.0) -> float:
    """The largest --mem-fraction-static (two decimals, rounded down) that leaves `need` bytes
    once SGLang has multiplied it by `scale` (a multimodal model up to 0.4.8)."""
    return math.floor((free - need) / free / scale * 100) / 100


def largest_graph_bs(room: int, need: OutsideNeed) -> int:
    """The largest --cuda-graph-max-bs whose graph buffers fit what the rest leaves (0: none)."""
    per_bs = reserve_constants()["per_graph_bs_mib"] * MIB
    return max(0, int((room - (need.at_start - need.graphs)) // per_bs))


def shorter_context(
    release: SglangRelease,
    inputs: FractionInputs,
    pool: tuple[int, int, int | None],
    room: int,
) -> int | None:
    """The longest --context-length (the context halved until it fits, not below 2048) whose
    request table leaves room for the rest; None when halving does not get there."""
    tokens, context, max_running = pool
    candidate = context // 2
    while candidate >= 2048:
        if outside_need(release, inputs, tokens, candidate, max_running).at_start <= room:
            return candidate
        candidate //= 2
    return None
