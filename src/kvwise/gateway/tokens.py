"""Counting a request's prompt tokens before it reaches the engine.

With the model's `tokenizer.json` and the `tokenizers` package, counts are exact for the text;
otherwise the count is the UTF-8 byte length, an upper bound for the byte-level BPE and
SentencePiece-with-byte-fallback tokenizers vLLM's models use (every token covers at least one
byte). Chat requests add a per-message allowance for the chat template's role markers, sized for
the longest common templates (ChatML: `<|im_start|>role\\n` ... `<|im_end|>\\n`; Llama 3 headers).

Each count carries a lower and an upper bound: admission reserves the upper bound (never
under-counts KV), and the 400 for an over-long prompt uses the lower bound (never refuses a prompt
the engine would take).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

# ChatML wraps each message in 5 tokens (<|im_start|>, role, \n, <|im_end|>, \n); Llama 3 in 5;
# 8 leaves room for templates that add a date or a separator.
TEMPLATE_TOKENS_PER_MESSAGE = 8
# "<|im_start|>assistant\n" and the like, opened for the reply
TEMPLATE_TOKENS_FOR_REPLY = 4
# Templates wrap tool definitions in instructions (Qwen2.5's "# Tools ... <tools></tools> ...
# <tool_call>" preamble is about 100 tokens)
TEMPLATE_TOKENS_FOR_TOOLS = 200


@dataclass(frozen=True)
class TokenCount:
    lower: int  # the engine sees at least this many prompt tokens
    upper: int  # and at most this many


class Tokenizer(Protocol):
    is_exact: bool

    def count(self, text: str) -> int: ...


class ByteEstimate:
    """No tokenizer: bytes bound the token count from above, and give no useful lower bound."""

    is_exact = False

    def count(self, text: str) -> int:
        return len(text.encode("utf-8"))


class HfTokenizer:
    is_exact = True

    def __init__(self, tokenizer_json: Path) -> None:
        from tokenizers import Tokenizer as _Tokenizer

        self._tokenizer = _Tokenizer.from_file(str(tokenizer_json))

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


def load_tokenizer(path: str | None) -> Tokenizer:
    """The model folder's (or the file's) tokenizer.json when usable, else the byte estimate."""
    if path is None:
        return ByteEstimate()
    candidate = Path(path)
    if candidate.is_dir():
        candidate = candidate / "tokenizer.json"
    if not candidate.is_file():
        return ByteEstimate()
    try:
        return HfTokenizer(candidate)
    except ImportError:
        return ByteEstimate()


def _content_text(content: Any) -> str:
    """Message content: a string, or OpenAI's list of parts (text parts counted)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def _bounds(tokenizer: Tokenizer, text: str, overhead: int) -> TokenCount:
    """Exact tokenizers bound from both sides; the byte estimate only from above."""
    n = tokenizer.count(text)
    return TokenCount(lower=n if tokenizer.is_exact else 0, upper=n + overhead)


def count_messages(tokenizer: Tokenizer, messages: list[dict[str, Any]]) -> TokenCount:
    """The messages' tokens inside the chat template (no reply allowance, no tools)."""
    # Tokens never merge across messages (the template puts special tokens between them),
    # so counting each content separately is exact for the text.
    contents = [_bounds(tokenizer, _content_text(m.get("content")), 0) for m in messages]
    # Templates render tool calls their own way, about as long as the JSON: upper bound only.
    calls_tokens = sum(
        tokenizer.count(json.dumps(m["tool_calls"])) for m in messages if m.get("tool_calls")
    )
    return TokenCount(
        lower=sum(c.lower for c in contents),
        upper=sum(c.upper for c in contents)
        + calls_tokens
        + TEMPLATE_TOKENS_PER_MESSAGE * len(messages),
    )


def count_tools(tokenizer: Tokenizer, tools: Any) -> TokenCount:
    """Tool definitions, which chat templates render into the prompt (as JSON or close to it)."""
    if not tools:
        return TokenCount(0, 0)
    return TokenCount(lower=0, upper=tokenizer.count(json.dumps(tools)) + TEMPLATE_TOKENS_FOR_TOOLS)


def count_chat(
    tokenizer: Tokenizer, messages: list[dict[str, Any]], tools: Any = None
) -> TokenCount:
    in_messages, in_tools = count_messages(tokenizer, messages), count_tools(tokenizer, tools)
    return TokenCount(
        lower=in_messages.lower + in_tools.lower,
        upper=in_messages.upper + in_tools.upper + TEMPLATE_TOKENS_FOR_REPLY,
    )


def count_prompt(tokenizer: Tokenizer, prompt: str | list[int]) -> TokenCount:
    """One `/v1/completions` prompt: text, or token ids (exact)."""
    if isinstance(prompt, str):
        return _bounds(tokenizer, prompt, 1)  # + a possible BOS token
    return TokenCount(lower=len(prompt), upper=len(prompt))
