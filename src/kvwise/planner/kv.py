"""The paged KV pool: bytes per token and per block, blocks, tokens and concurrency.

Follows vLLM V1's `get_kv_cache_groups` / `get_kv_cache_configs`: layers with the same attention
spec share a KV-cache group; a hybrid model (sliding + full) splits its layers into groups of
equal size, padding the last, and every block holds one page of each layer of a group. The pool
is shared, and a request takes blocks from every group (sliding groups capped by the window).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwise.core.models import FULL, MAMBA, MLP, SLIDING, ModelSpec
from kvwise.errors import UnsupportedModelError

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
    # tokens per block where vLLM raised it to equalise page sizes (Gemma 4's full layers,
    # `unify_kv_cache_spec_page_size`); None: the layout's block_size
    block_size: int | None = None


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

    def block_size_of(self, group: KvGroup) -> int:
        return group.block_size or self.block_size

    @property
    def bytes_per_token(self) -> int:
        """KV bytes one token costs on this rank (all real layers)."""
        return sum(
            g.num_layers * self.page_bytes // self.block_size_of(g)
            for g in self.groups
            if g.kind != MAMBA
        )


def kv_dtype_bytes(kv_cache_dtype: str, runtime_dtype: str) -> int:
    return KV_DTYPE_BYTES[runtime_dtype if kv_cache_dtype == "auto" else kv_cache_dtype]


def _group_layers(layer_types: tuple[str, ...]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for kind in layer_types:
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def attention_page_bytes_per_token(
    model: ModelSpec, tp: int, dtype_bytes: int, kind: str = SLIDING
) -> int:
    """One attention layer's KV for one token on one rank (FullAttentionSpec, block_size 1);
    `kind` matters only where full-attention layers have their own head shape (Gemma 4)."""
    if model.mla is not None and model.mla.has_latent_cache:
        # MLAAttentionSpec: the latent and rope key once per token, replicated on every TP rank
        # (one KV "head", vllm/v1/kv_cache_interface.py), no separate V
        return model.mla.cache_dim * dtype_bytes
    if model.mla is not None:
        # before the latent cache: K and V for every query head, padded to head size 256
        return model.num_attention_heads // tp * 2 * PRE_MLA_HEAD_SIZE * dtype_bytes
    # K and V for this rank's KV heads (replicated when fewer heads than ranks)
    heads_per_rank = max(1, model.kv_heads_of(kind) // tp)
    return heads_per_rank * 2 * model.head_dim_of(kind) * dtype_bytes


def _block_multiples(
    model: ModelSpec, kinds: set[str], tp: int, dtype_bytes: int
) -> dict[str, int] | None:
    """Per kind, the factor vLLM multiplies block_size by to give every layer the largest page
    (v1/core/kv_cache_utils.py:unify_kv_cache_spec_page_size, read at 0.19.0, 0.28.0, 0.32.0);
    None when every attention layer has the same page. 0.32.0 pads instead where the largest
    page is not a multiple of a smaller one; kvwise refuses that case."""
    if model.full_head_dim is None and model.full_num_kv_heads is None:
        return None
    per_token = {k: attention_page_bytes_per_token(model, tp, dtype_bytes, k) for k in kinds}
    largest = max(per_token.values())
    if any(largest % size for size in per_token.values()):
        raise UnsupportedModelError(
            f"{model.model_id}: not modelled: KV pages of different attention layers that do "
            f"not divide each other ({sorted(set(per_token.values()))} bytes per token)"
        )
    return {kind: largest // size for kind, size in per_token.items()}


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
    layers_per_rank = -(-model.num_layers // pp)
    # MLP-only layers (Nemotron-H) keep nothing per token or per request
    types = tuple(t for t in model.attention_layer_types[:layers_per_rank] if t != MLP)
    multiples = _block_multiples(model, set(types), tp, dtype_bytes)
    if multiples is not None:
        return _unified_page_layout(
            model,
            types,
            multiples,
            block_size,
            tp,
            dtype_bytes,
            is_hybrid_manager=is_hybrid_manager,
        )
    per_token = attention_page_bytes_per_token(model, tp, dtype_bytes)
    page = block_size * per_token
    if model.mamba is not None:
        from kvwise.planner.kv_mamba import mamba_block_size  # for such models only

        block_size = mamba_block_size(model, tp, per_token, block_size)
        page = block_size * per_token  # the mamba state is padded to this page
    counts = _group_layers(types)
    if len(counts) == 1 or (not is_hybrid_manager and MAMBA not in counts):
        kind = next(iter(counts)) if len(counts) == 1 else FULL
        group = KvGroup(kind, len(types), _window(model, kind))
        return KvLayout((group,), page, block_size, mamba_pages_per_request)
    groups: list[KvGroup] = []
    group_size = _group_size(counts)
    for kind in (FULL, SLIDING, MAMBA):
        num_groups = -(-counts.get(kind, 0) // group_size)
        groups += [KvGroup(kind, group_size, _window(model, kind))] * num_groups
    return KvLayout(tuple(groups), page, block_size, mamba_pages_per_request)


def _group_size(counts: dict[str, int]) -> int:
    """`_get_kv_cache_groups_uniform_page_size`: the smallest bucket, or the largest when the
    buckets are within 1.5x of each other."""
    smallest, largest = min(counts.values()), max(counts.values())
    return largest if largest < 1.5 * smallest else smallest


def _unified_page_layout(
    model: ModelSpec,
    types: tuple[str, ...],
    multiples: dict[str, int],
    block_size: int,
    tp: int,
    dtype_bytes: int,
    *,
    is_hybrid_manager: bool,
) -> KvLayout:
    """Attention layers with different pages (Gemma 4: sliding 8 x 256, full 2 x 512): vLLM
    (`get_kv_cache_groups`, 0.19.0+) raises the block size of the smaller-page layers until
    every page is the largest one, then groups as for any hybrid model. At 0.30+ a
    block-outermost KV layout packs mixed pages instead (`_get_packed_kv_cache_groups`); the
    default layout for backends that declare none (Triton, FlashAttention) is LBNHC
    (v1/attention/backends/utils.py `_DEFAULT_LAYOUT_PREFERENCE`, read at 0.32.0), which is not
    block-outermost, so the unified-page path is the one taken."""
    if not is_hybrid_manager:
        raise UnsupportedModelError(
            f"{model.model_id}: not modelled: --disable-hybrid-kv-cache-manager with attention "
            "layers of different head shapes"
        )
    largest_kind = min(multiples, key=lambda kind: multiples[kind])
    page = block_size * attention_page_bytes_per_token(model, tp, dtype_bytes, largest_kind)
    counts = _group_layers(types)
    group_size = _group_size(counts)
    groups: list[KvGroup] = []
    for kind in (FULL, SLIDING):
        num_groups = -(-counts.get(kind, 0) // group_size)
        grown = block_size * multiples[kind] if multiples.get(kind, 1) > 1 else None
        groups += [KvGroup(kind, group_size, _window(model, kind), grown)] * num_groups
    return KvLayout(tuple(groups), page, block_size)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def blocks_per_request(layout: KvLayout, max_model_len: int, max_num_batched_tokens: int) -> int:
    """Blocks one request of max_model_len tokens holds, summed over groups."""
    total = 0
    for group in layout.groups:
        block = layout.block_size_of(group)
        if group.kind == SLIDING and group.sliding_window:
            # SlidingWindowSpec: window - 1 retained tokens plus the tokens in flight, + 1 block
            in_flight = MAX_CONCURRENT_BATCHES * max_num_batched_tokens
            tokens = min(group.sliding_window - 1 + in_flight, max_model_len)
            total += cdiv(tokens, block) + 1
        elif group.kind == MAMBA:
            # MambaSpec.max_memory_usage_bytes: 1 page ("none"), 2 ("align", prefix caching)
            total += layout.mamba_pages_per_request
        else:
            total += cdiv(max_model_len, block)
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
