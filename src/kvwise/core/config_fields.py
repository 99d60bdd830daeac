"""Reading fields of a Hugging Face config.json, the way every architecture reader needs them."""

from __future__ import annotations

from typing import Any

from kvwise.errors import DataError


def get(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    """The first of `names` the config sets (not null), else `default`."""
    for name in names:
        if cfg.get(name) is not None:
            return cfg[name]
    return default


def require(cfg: dict[str, Any], *names: str) -> Any:
    value = get(cfg, *names)
    if value is None:
        raise DataError(f"config.json lacks {' / '.join(names)}")
    return value


def base_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """Fields every Llama-like config names the same way."""
    hidden = int(require(cfg, "hidden_size"))
    heads = int(require(cfg, "num_attention_heads"))
    return {
        "hidden_size": hidden,
        "num_layers": int(require(cfg, "num_hidden_layers", "num_layers")),
        "num_attention_heads": heads,
        # Configs without the key are multi-head attention (transformers' default)
        "num_kv_heads": int(get(cfg, "num_key_value_heads", default=heads)),
        "head_dim": int(get(cfg, "head_dim", default=hidden // heads)),
        "intermediate_size": int(require(cfg, "intermediate_size")),
        "vocab_size": int(require(cfg, "vocab_size")),
        "max_position_embeddings": int(
            get(cfg, "max_position_embeddings", "model_max_length", default=2048)
        ),
        "tie_word_embeddings": bool(get(cfg, "tie_word_embeddings", default=False)),
    }
