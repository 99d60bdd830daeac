"""SGLang's default `mem_fraction_static` per release family (server_args.py, cited per family in
core/data/sglang_versions.json and docs/sglang_rules.md)."""

from __future__ import annotations

from dataclasses import dataclass

from kvwise.planner.sglang.releases import (
    SglangRelease,
    default_chunked_prefill_size,
    default_cuda_graph_max_bs,
    reserve_constants,
)


@dataclass(frozen=True)
class FractionInputs:
    gpu_mib: float
    tp: int
    pp: int
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    is_mla: bool
    # the release's multimodal factor on the default alone (0.4.9+); 1.0 for text models and for
    # releases that scale the fraction in use, given or default (plan.py applies those)
    default_multimodal_factor: float = 1.0


def _per_parallel(release: SglangRelease, parallel: int) -> float:
    for at_least, fraction in release.data["fraction_by_parallel"]:
        if parallel >= at_least:
            return float(fraction)
    raise AssertionError("the last entry covers parallel size 1")


def _reserve_table_mib(release: SglangRelease, gpu_mib: float, parallel: int) -> float:
    for limit, base_gib, per_rank_gib in release.data["reserve_table_gib"]:
        if limit is None or gpu_mib < limit:
            return float((base_gib + parallel * per_rank_gib) * 1024)
    raise AssertionError("the last row has no upper limit")


def piecewise_sizes(max_tokens: int) -> int:
    """How many token counts `_generate_piecewise_cuda_graph_tokens` captures up to max_tokens."""
    steps = ((4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256))
    sizes = [n for start, stop, step in steps for n in range(start, stop + 1, step)]
    sizes += list(range(4608, max_tokens + 1, 512))
    return sum(1 for n in sizes if n <= max_tokens)


def reserve_formula_mib(release: SglangRelease, inputs: FractionInputs) -> float:
    """0.5.3+: the MiB SGLang keeps outside the static pool for activations and graphs."""
    const = reserve_constants()
    chunk = max(inputs.chunked_prefill_size, const["min_chunk_tokens"])
    reserved = const["constant_mib"] + chunk * const["per_chunk_token_mib"]
    reserved += inputs.cuda_graph_max_bs * const["per_graph_bs_mib"]
    reserved += inputs.tp * inputs.pp * const["per_parallel_rank_mib"]
    if release.data.get("piecewise_graphs_by_default"):
        if inputs.is_mla:
            reserved += release.data["piecewise_mla_reserve_mib"]
        else:
            reserved += (
                piecewise_sizes(inputs.chunked_prefill_size) * const["per_piecewise_size_mib"]
            )
    if inputs.gpu_mib > const["large_card_min_mib"]:
        reserved = max(reserved, const["large_card_floor_mib"])
    return float(reserved)


def _large_card_mix(release: SglangRelease, gpu_mib: float, fraction: float) -> float:
    data = release.data
    if gpu_mib * 2**20 / 1e6 > data["huge_card_min_mb"]:
        return float(data["huge_card_fraction"])
    if gpu_mib > data["large_card_min_mib"]:
        mixed = fraction + data["large_card_mix_mib"] * (1 - fraction) / gpu_mib
        return min(mixed, (gpu_mib - data["large_card_reserve_mib"]) / gpu_mib)
    return fraction


def default_fraction(release: SglangRelease, inputs: FractionInputs) -> float:
    """`mem_fraction_static` when the user leaves it unset."""
    rule = release.data["fraction_rule"]
    parallel = inputs.tp * inputs.pp
    gpu = inputs.gpu_mib
    if rule == "per_parallel":
        fraction = _per_parallel(release, inputs.tp)  # tp_size alone up to 0.4.6
    elif rule == "per_parallel_then_reserve_above_80g":
        limit = release.data["per_parallel_max_mib"]
        reserve = release.data["large_card_reserve_mib"]
        fraction = _per_parallel(release, inputs.tp) if gpu <= limit else (gpu - reserve) / gpu
    elif rule == "per_parallel_then_large_card_mix":
        limit = release.data["per_parallel_max_mib"]
        base = release.data["above_per_parallel_fraction"]
        fraction = _per_parallel(release, parallel) if gpu <= limit else base
        fraction = _large_card_mix(release, gpu, fraction)
    elif rule == "reserve_table":
        fraction = round((gpu - _reserve_table_mib(release, gpu, parallel)) / gpu, 3)
    else:
        fraction = round((gpu - reserve_formula_mib(release, inputs)) / gpu, 3)
    return fraction * inputs.default_multimodal_factor


def defaults_for(
    release: SglangRelease, gpu_mib: float, tp: int, chunk: int | None, graph_bs: int | None
) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs): the user's, else the release's for this card."""
    chunk_size = chunk if chunk is not None else default_chunked_prefill_size(release, gpu_mib)
    bs = graph_bs if graph_bs is not None else default_cuda_graph_max_bs(release, gpu_mib, tp)
    return chunk_size, bs
