from __future__ import annotations

from pathlib import Path

from kvwise.gateway.tokens import (
    ByteEstimate,
    HfTokenizer,
    count_chat,
    count_prompt,
    load_tokenizer,
)

TOKENIZER = Path(__file__).resolve().parents[2] / "scripts" / "tiny_qwen2_tokenizer.json"


def test_the_model_folder_tokenizer_is_used_when_present(tmp_path: Path) -> None:
    assert isinstance(load_tokenizer(str(TOKENIZER)), HfTokenizer)
    assert isinstance(
        load_tokenizer(str(tmp_path)), ByteEstimate
    )  # a folder without tokenizer.json
    assert isinstance(load_tokenizer(None), ByteEstimate)


def test_exact_counts_bound_from_both_sides() -> None:
    tokenizer = HfTokenizer(TOKENIZER)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "def f(x): return x"},
    ]
    count = count_chat(tokenizer, messages)
    text_tokens = tokenizer.count("Be brief.") + tokenizer.count("def f(x): return x")
    assert count.lower == text_tokens
    assert count.upper == text_tokens + 2 * 8 + 4  # template allowance per message + the reply's


def test_without_a_tokenizer_bytes_bound_from_above_only() -> None:
    count = count_chat(ByteEstimate(), [{"role": "user", "content": "héllo"}])
    assert (count.lower, count.upper) == (0, 6 + 8 + 4)  # é is 2 bytes in UTF-8


def test_token_id_prompts_are_exact() -> None:
    ids = [5, 6, 7]
    assert count_prompt(ByteEstimate(), ids).lower == count_prompt(ByteEstimate(), ids).upper == 3
