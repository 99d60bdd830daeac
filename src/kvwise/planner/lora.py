"""GPU memory of `--enable-lora`: the adapter slots vLLM allocates while loading the model.

vLLM wraps every supported module when LoRA is on (vllm/lora/models.py, later
vllm/lora/model_manager.py: LoRAModelManager._create_lora_modules) and each wrapper allocates,
in `create_lora_weights`, stacked tensors for `max_loras` adapters of rank `max_lora_rank` in
`lora_dtype`, whatever adapters are later loaded (vllm/lora/layers.py, 0.4.0-0.11; the same
shapes in vllm/lora/layers/*.py from 0.12):
  linear, per output slice:  lora_a [max_loras, 1, rank, input]  lora_b [max_loras, 1, output, rank]
  embed_tokens:  lora_a [max_loras, vocab + extra, rank]  lora_b [max_loras, 1, hidden, rank]
                 + the extra vocabulary rows [max_loras, extra, hidden]
  lm_head (LogitsProcessorWithLoRA):  lora_a [max_loras, 1, rank, hidden]
                 lora_b [max_loras, 1, vocab + extra (padded to 256), rank]
                 + its own extra vocabulary rows [max_loras, extra, hidden]
Column-parallel layers keep lora_a whole and shard lora_b's output; row-parallel layers shard
lora_a's input (fully_sharded_loras off, vLLM's default). This happens inside load_model, so it
is part of the "weights" vLLM logs. The profile run's dummy adapters are written into these
slots (no further GPU memory); the punica kernels' [slices, tokens, rank] fp32 buffers are a
few MiB and not modelled.
"""

from __future__ import annotations

from kvwise.core.flags import VllmFlags
from kvwise.core.models import DTYPE_BYTES, ModelSpec
from kvwise.errors import InvalidFlagError, UnsupportedModelError
from kvwise.planner.defaults import VersionRules
from kvwise.planner.result import ResolvedFlags

DEFAULT_MAX_LORAS = 1  # LoRAConfig.max_loras
DEFAULT_MAX_LORA_RANK = 16  # LoRAConfig.max_lora_rank
LORA_VOCAB_PADDING_SIZE = 256  # LoRAConfig.lora_vocab_padding_size (0.4-0.11)


def _linear_elements_per_rank(model: ModelSpec, tp: int) -> int:
    """Sum over a layer's LoRA-wrapped linears of (lora_a input + lora_b output) per unit rank."""
    if model.full_head_dim is not None or model.full_num_kv_heads is not None:
        raise UnsupportedModelError(
            f"{model.model_id}: not modelled: LoRA slots on attention layers of different head "
            "shapes (Gemma 4's full-attention layers)"
        )
    hidden, inter = model.hidden_size, model.intermediate_size // tp
    q = model.q_size // tp
    kv = max(1, model.num_kv_heads // tp) * model.head_dim  # replicated below one head per rank
    qkv = 3 * hidden + q + 2 * kv  # QKVParallelLinearWithLoRA: q, k, v slices
    o_proj = q + hidden  # RowParallelLinearWithLoRA: sharded input, whole output
    mlp_slices = 2 if model.gated_mlp else 1
    gate_up = mlp_slices * (hidden + inter)  # MergedColumnParallelLinearWithLoRA
    down = inter + hidden
    return qkv + o_proj + gate_up + down


def _vocab_elements(model: ModelSpec, rank: int, extra: int) -> int:
    """embed_tokens and lm_head LoRA tensors of one adapter (vocabulary not sharded)."""
    vocab, hidden = model.vocab_size, model.hidden_size
    embedding = (vocab + extra) * rank + hidden * rank + extra * hidden
    if extra:
        # 0.4-0.11 LogitsProcessorWithLoRA: lora_b rows padded to lora_vocab_padding_size (256),
        # and its own [extra, hidden] embeddings for the added vocabulary
        padded = -(-(vocab + extra) // LORA_VOCAB_PADDING_SIZE) * LORA_VOCAB_PADDING_SIZE
        return embedding + rank * hidden + padded * rank + extra * hidden
    return embedding + rank * hidden + vocab * rank  # 0.12+: no added vocabulary


def _lora_dtype_bytes(flags: VllmFlags, resolved: ResolvedFlags) -> int:
    dtype = flags.lora_dtype or "auto"
    return DTYPE_BYTES[resolved.dtype if dtype == "auto" else dtype]


def lora_bytes(
    model: ModelSpec, flags: VllmFlags, resolved: ResolvedFlags, rules: VersionRules
) -> int:
    """Bytes of LoRA slots on each GPU (0 without --enable-lora)."""
    if not flags.enable_lora:
        return 0
    if model.moe is not None:
        raise UnsupportedModelError("not modelled: LoRA slots of MoE expert layers")
    rank = flags.max_lora_rank or DEFAULT_MAX_LORA_RANK
    if rank not in rules.lora_max_ranks:
        allowed = ", ".join(str(r) for r in rules.lora_max_ranks)
        raise InvalidFlagError(
            f"max_lora_rank ({rank}) must be one of {allowed} in vLLM {rules.version}"
        )
    max_loras = flags.max_loras or DEFAULT_MAX_LORAS
    layers = -(-model.num_layers // resolved.pipeline_parallel_size)
    linear = layers * _linear_elements_per_rank(model, resolved.tensor_parallel_size) * rank
    vocab = _vocab_elements(model, rank, rules.lora_extra_vocab_size)
    return max_loras * (linear + vocab) * _lora_dtype_bytes(flags, resolved)
