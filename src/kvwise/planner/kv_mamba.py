"""Hybrid attention/Mamba models in vLLM V1: the recurrent state as a KV-cache "page".

vLLM V1 (0.10.2+) keeps one Mamba2 / gated-DeltaNet state per request and layer (MambaSpec) in
the same block pool as attention KV. `HybridAttentionMambaModelConfig.verify_and_update_config`
(vllm/model_executor/models/config.py) makes the pages equal: the attention block size grows to
the smallest multiple of 16 tokens whose page holds one state, and the state is padded to that
page. Earlier releases kept the state outside the KV pool (`kv_release.py` refuses them).

Prefix caching sets the mamba cache mode (`mamba_cache_mode`), which decides how many state pages
a request holds (v1/kv_cache_interface.py:MambaSpec.max_memory_usage_bytes): "none" 1, "align" 2
(the running state and the one kept at the last block boundary), "all" one per block of
max_model_len with the attention block aligned to the mamba chunk size
(platforms/interface.py:_align_hybrid_block_size). kvwise models "none" and "align" and refuses
"all", which it does not size.
"""

from __future__ import annotations

from kvwise.core.models import DTYPE_BYTES, ModelSpec
from kvwise.errors import UnsupportedModelError

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


# v0.26.0-v0.27.x vllm/model_executor/models/*.py: the models with SupportsMambaPrefixCaching,
# which prefix caching puts in "all" mode (MambaModelConfig.verify_and_update_config)
MAMBA_PREFIX_CACHING_ARCHS = frozenset(
    {
        "FalconH1ForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "JambaForCausalLM",
        "Mamba2ForCausalLM",
        "MambaForCausalLM",
        "NemotronHForCausalLM",
        "Zamba2ForCausalLM",
    }
)
STATE_PAGES_PER_REQUEST = {"none": 1, "align": 2}


def mamba_cache_mode(model: ModelSpec, enable_prefix_caching: bool, rule: str) -> str:
    """vLLM's mamba_cache_mode for this model ("none" without prefix caching); refuses the
    modes kvwise does not size. `rule`: the release's `mamba_prefix_cache_mode`."""
    if not enable_prefix_caching:
        return "none"
    if rule == "align":  # 0.28+
        return "align"
    if rule == "all_if_supported" and model.architecture not in MAMBA_PREFIX_CACHING_ARCHS:
        return "align"  # 0.20-0.27
    if rule == "all_if_supported":
        reason = (
            "mamba_cache_mode 'all' (prefix caching on this release: a state page per block of "
            "max_model_len, the attention block aligned to the mamba chunk size)"
        )
    else:
        reason = "prefix caching of the mamba state on releases before 0.20"
    raise UnsupportedModelError(
        f"{model.model_id}: not modelled: {reason}; plan with --no-enable-prefix-caching "
        "(one state page per request)"
    )
