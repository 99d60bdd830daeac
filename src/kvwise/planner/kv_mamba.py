"""Hybrid attention/Mamba models in vLLM V1: the recurrent state as a KV-cache "page".

vLLM V1 (0.10.2+) keeps one Mamba2 / gated-DeltaNet state per request and layer (MambaSpec) in
the same block pool as attention KV. `HybridAttentionMambaModelConfig.verify_and_update_config`
(vllm/model_executor/models/config.py) makes the pages equal: the attention block size grows to
the smallest multiple of 16 tokens whose page holds one state, and the state is padded to that
page. kvwise models this without prefix caching (`mamba_cache_mode` "none": one state page per
request); earlier releases kept the state outside the KV pool (`kv_release.py` refuses them).
"""

from __future__ import annotations

from kvwise.core.models import DTYPE_BYTES, ModelSpec

KERNEL_BLOCK_ALIGNMENT = 16  # FlashAttention / FlashInfer block sizes are multiples of 16


def mamba_page_bytes(model: ModelSpec, tp: int) -> int:
    """One layer's state for one request on one rank (MambaSpec.page_size_bytes, unpadded)."""
    state = model.mamba
    assert state is not None
    # conv and (default "auto") SSM states are kept in the model dtype, whatever the KV dtype
    conv_bytes = DTYPE_BYTES[model.dtype]
    ssm_bytes = DTYPE_BYTES[state.ssm_state_dtype or model.dtype]
    conv = (state.conv_kernel - 1) * (state.conv_channels_at(tp) // tp) * conv_bytes
    rows, cols = state.ssm_state_dims
    return conv + (state.ssm_heads // tp) * rows * cols * ssm_bytes


def mamba_block_size(model: ModelSpec, tp: int, attention_bytes_per_token: int, block: int) -> int:
    """The attention block size vLLM sets so that one attention page holds one mamba state."""
    page = mamba_page_bytes(model, tp)
    align = KERNEL_BLOCK_ALIGNMENT
    needed = align * -(-page // (align * attention_bytes_per_token))
    return max(block, needed)  # a user's larger --block-size is kept
