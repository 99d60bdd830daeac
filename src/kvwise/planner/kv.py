"""The paged KV pool: bytes per token and per block, blocks, tokens and concurrency.

Follows vLLM V1's `get_kv_cache_groups` / `get_kv_cache_configs`: layers with the same attention
spec share a KV-cache group; a hybrid model (sliding + full) splits its layers into groups of
equal size, padding the last, and every block holds one page of each layer of a group. The pool
is shared, and a request takes blocks from every group (sliding groups capped by the window).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwise.core.models import FULL, MAMBA, MLP, SLIDING, ModelSpec

KV_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "bfloat16": 2, "float16": 2, "float32": 4}
# vLLM < 0.7.1 DeepseekV2Attention: Attention(num_local_heads, 256, ...), q/k/v padded to 256
# (29.30 GiB of weights and 35.42 GiB -> 5,373 blocks for DeepSeek-V2-Lite, vllm PR #10927)
PRE_MLA_HEAD_SIZE = 256
MAX_CONCURRENT_BATCHES = 2  # async scheduling keeps two batches in flight (sliding-window cap)


@dataclass(frozen=True)
class KvGroup:
    kind: str  # FULL, SLIDING or MAMBA
    num_layers: int  # layers per group on this rank, padding included
    sliding_window: int | None


@dataclass(frozen=True)
class KvLayout:
    groups: tuple[KvGroup, ...]
    page_bytes: int  # one layer's page: block_size tokens of K and V (or one padded mamba state)
    block_size: int
    mamba_pages_per_request: int = 1  # state pages a request holds per mamba layer (cache mode)

    @property
    def bytes_per_block(self) -> int:
        # the pool's block holds a page for every layer of the largest group
        return max(g.num_layers for g in self.groups) * self.page_bytes

    @property
    def bytes_per_token(self) -> int:
        """KV bytes one token costs on this rank (all real layers)."""
        layers = sum(g.num_layers for g in self.groups if g.kind != MAMBA)
        return layers * self.page_bytes // self.block_size


def kv_dtype_bytes(kv_cache_dtype: str, runtime_dtype: str) -> int:
    return KV_DTYPE_BYTES[runtime_dtype if kv_cache_dtype == "auto" else kv_cache_dtype]


def _group_layers(layer_types: tuple[str, ...]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for kind in layer_types:
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def attention_page_bytes_per_token(model: ModelSpec, tp: int, dtype_bytes: int) -> int:
    """One attention layer's KV for one token on one rank (FullAttentionSpec, block_size 1)."""
    if model.mla is not None and model.mla.has_latent_cache:
        # MLAAttentionSpec: the latent and rope key once per token, replicated on every TP rank
        # (one KV "head", vllm/v1/kv_cache_interface.py), no separate V
        return model.mla.cache_dim * dtype_bytes
    if model.mla is not None:
        # before the latent cache: K and V for every query head, padded to head size 256
        return model.num_attention_heads // tp * 2 * PRE_MLA_HEAD_SIZE * dtype_bytes
    # K and V for this rank's KV heads (replicated when fewer heads than ranks)
    heads_per_rank = max(1, model.num_kv_heads // tp)
    return heads_per_rank * 2 * model.head_dim * dtype_bytes


def _window(model: ModelSpec, kind: str) -> int | None:
    return model.sliding_window if kind == SLIDING else None


def kv_layout(
    model: ModelSpec,
    *,
    tp: int,
    pp: int,
    block_size: int,
    dtype_bytes: int,
    is_hybrid_manager: bool = True,
    mamba_pages_per_request: int = 1,
) -> KvLayout:
    """KV-cache groups and page size on the most loaded rank."""
    per_token = attention_page_bytes_per_token(model, tp, dtype_bytes)
    page = block_size * per_token
    if model.mamba is not None:
        from kvwise.planner.kv_mamba import mamba_block_size  # for such models only

        block_size = mamba_block_size(model, tp, per_token, block_size)
        page = block_size * per_token  # the mamba state is padded to this page
    layers_per_rank = -(-model.num_layers // pp)
    # MLP-only layers (Nemotron-H) keep nothing per token or per request
    types = tuple(t for t in model.attention_layer_types[:layers_per_rank] if t != MLP)
    counts = _group_layers(types)
    if len(counts) == 1 or (not is_hybrid_manager and MAMBA not in counts):
        kind = next(iter(counts)) if len(counts) == 1 else FULL
        group = KvGroup(kind, len(types), _window(model, kind))
        return KvLayout((group,), page, block_size, mamba_pages_per_request)
    smallest, largest = min(counts.values()), max(counts.values())
    # group size: the smallest bucket, or the largest when buckets are within 1.5x of each other
    group_size = largest if largest < 1.5 * smallest else smallest
    groups: list[KvGroup] = []
    for kind in (FULL, SLIDING, MAMBA):
        num_groups = -(-counts.get(kind, 0) // group_size)
        groups += [KvGroup(kind, group_size, _window(model, kind))] * num_groups
    return KvLayout(tuple(groups), page, block_size, mamba_pages_per_request)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def blocks_per_request(layout: KvLayout, max_model_len: int, max_num_batched_tokens: int) -> int:
    """Blocks one request of max_model_len tokens holds, summed over groups."""
    total = 0
    for group in layout.groups:
        if group.kind == SLIDING and group.sliding_window:
            # SlidingWindowSpec: window - 1 retained tokens plus the tokens in flight, + 1 block
            in_flight = MAX_CONCURRENT_BATCHES * max_num_batched_tokens
            tokens = min(group.sliding_window - 1 + in_flight, max_model_len)
            total += cdiv(tokens, layout.block_size) + 1
        elif group.kind == MAMBA:
            # MambaSpec.max_memory_usage_bytes: 1 page ("none"), 2 ("align", prefix caching)
            total += layout.mamba_pages_per_request
        else:
            total += cdiv(max_model_len, layout.block_size)
    return total


def kv_tokens(
    layout: KvLayout, num_blocks: int, max_model_len: int, per_request: int, formula: str
) -> int:
    """The "GPU KV cache size: N tokens" figure, as the given vLLM release computes it."""
    if formula == "concurrency_x_len":  # 0.21+
        return int(num_blocks / per_request * max_model_len)
    if formula == "blocks_per_group":  # 0.9.1-0.20: blocks shared evenly by the KV-cache groups
        return num_blocks // len(layout.groups) * layout.block_size
    return num_blocks * layout.block_size  # V0 and V1 0.8.0-0.9.0


def estimated_max_model_len(
    layout: KvLayout, available_bytes: int, max_num_batched_tokens: int
) -> int:
    """Longest max_model_len whose one request fits the pool (vLLM's binary search)."""
    low, high = 0, 1 << 24
    while low < high:
        mid = (low + high + 1) // 2
        needed = blocks_per_request(layout, mid, max_num_batched_tokens) * layout.bytes_per_block
        if needed <= available_bytes:
            low = mid
        else:
            high = mid - 1
    return low
