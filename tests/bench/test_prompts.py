"""Segment text with the token counts the workload asks for, the same text for the same id."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kvwise.bench.prompts import (
    LocalTokenizer,
    SegmentTexts,
    WordEstimate,
    exact_text,
    find_local_tokenizer,
)

REPO = Path(__file__).resolve().parents[2]
TINY_TOKENIZER = REPO / "scripts" / "tiny_qwen2_tokenizer.json"  # the tiny Qwen2's vocabulary


@pytest.fixture(scope="module")
def tokenizer() -> LocalTokenizer:
    return LocalTokenizer(TINY_TOKENIZER)


@pytest.mark.parametrize("num_tokens", [1, 2, 7, 50, 333, 2000])
def test_text_has_exactly_the_tokens_asked_for(tokenizer: LocalTokenizer, num_tokens: int) -> None:
    text, count = exact_text(tokenizer, random.Random(num_tokens), num_tokens)
    assert count == num_tokens
    assert len(tokenizer.encode(text)) == num_tokens


def test_same_segment_same_text_other_salt_other_text(tokenizer: LocalTokenizer) -> None:
    first, again, other = (
        SegmentTexts(tokenizer, 1),
        SegmentTexts(tokenizer, 1),
        SegmentTexts(tokenizer, 2),
    )
    assert first.text(5, 40) == again.text(5, 40)  # a shared system prompt is byte-identical
    assert first.text(5, 40) != first.text(6, 40)
    assert first.text(5, 40) != other.text(5, 40)  # a new run starts with a cold prefix cache


def test_segments_concatenate_to_the_sum_of_their_tokens(tokenizer: LocalTokenizer) -> None:
    texts = SegmentTexts(tokenizer, 3)
    segments = [(1, 120), (2, 35), (3, 80)]
    joined = "".join(texts.text(seg_id, n) for seg_id, n in segments)
    assert len(tokenizer.encode(joined)) == pytest.approx(235, abs=2)


def test_without_a_tokenizer_a_word_is_a_token() -> None:
    text, count = exact_text(WordEstimate(), random.Random(0), 25)
    assert count == 25 and len(text.split()) == 25


def test_tokenizer_found_from_a_model_dir_its_config_or_the_file(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "config.json").write_text("{}")
    found = tmp_path / "tokenizer.json"
    assert find_local_tokenizer(str(tmp_path)) == found
    assert find_local_tokenizer(None, str(tmp_path / "config.json")) == found
    assert find_local_tokenizer("Qwen/Qwen2.5-7B-Instruct", str(found)) == found
    assert find_local_tokenizer("Qwen/Qwen2.5-7B-Instruct") is None
