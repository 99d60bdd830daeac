"""Text for a workload's segments, with the token counts the workload asks for.

A segment is a run of tokens named by an id (`kvwise.sim.workloads`): equal ids are equal text,
so a shared system prompt is byte-identical in every session and vLLM's prefix cache sees it as
the simulator does. Text is drawn from a word list with a generator seeded by the segment id,
then cut to exactly the segment's token count with the model's tokenizer:

* `LocalTokenizer`: the model's `tokenizer.json` through the `tokenizers` package (exact);
* `ServerTokenizer`: vLLM's `/tokenize` and `/detokenize` endpoints (exact, one call per cut);
* `WordEstimate`: neither available: one common English word per token (about right for the
  large BPE vocabularies of Qwen/Llama/Mistral; the server's usage fields give the truth).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import httpx

from kvwise.errors import UpstreamError, UsageError

# Common English words, each one token with its leading space in the large BPE vocabularies.
_WORD_LIST = """the of and to in is was for on are with as be at by this from or have an they which one
    you were her all she there would their we him been has when who will more no if out so said
    what up its about into than them can only other new some could time these two may then do
    first any my now such like our over man me even most made after also did many before must
    through back years where much your way well down should because each just those people how
    too little state good very make world still own see men work long get here between both
    life being under never day same another know while last might us great old year off come
    since against go came right used take three states himself few house use during without
    again place around however home small found thought went say part once general high upon
    school every don does got united left number course war until always away something fact
    though water less public put think almost hand enough far took head yet government system
    better set told nothing night end why called didn eyes find going look asked later knew
    point next city give group toward young"""
WORDS = tuple(_WORD_LIST.split())
MAX_CUT_TRIES = 6  # cuts around the target tried before accepting the nearest count


class TokenCounter(Protocol):
    """Turns text into token ids and back, as the served model does."""

    source: str  # "tokenizer.json <path>", "server /tokenize", "estimate"
    is_exact: bool

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class LocalTokenizer:
    is_exact = True

    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # optional extra: kvwise[bench]
            raise UsageError("reading tokenizer.json needs `pip install tokenizers`") from exc
        self._tokenizer = Tokenizer.from_file(str(path))
        self.source = f"tokenizer.json {path}"

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=False))


class ServerTokenizer:
    """vLLM's `/tokenize` and `/detokenize` (not part of the OpenAI API; vLLM and SGLang only)."""

    is_exact = True
    source = "server /tokenize"

    def __init__(self, client: httpx.Client, base_url: str, model: str) -> None:
        self._client, self._base_url, self._model = client, base_url, model

    def _post(self, path: str, body: dict[str, object]) -> dict[str, object]:
        try:
            response = self._client.post(f"{self._base_url}{path}", json=body)
        except httpx.HTTPError as exc:
            raise UpstreamError(f"{path}: {exc}") from exc
        if response.status_code != 200:
            raise UpstreamError(f"{path} answered {response.status_code}")
        data: dict[str, object] = response.json()
        return data

    def encode(self, text: str) -> list[int]:
        data = self._post(
            "/tokenize", {"model": self._model, "prompt": text, "add_special_tokens": False}
        )
        return [int(t) for t in data["tokens"]]  # type: ignore[attr-defined]

    def decode(self, ids: list[int]) -> str:
        return str(self._post("/detokenize", {"model": self._model, "tokens": ids})["prompt"])


class WordEstimate:
    """No tokenizer: a token is a word (an estimate, reported as such)."""

    is_exact = False
    source = "estimate (one word per token)"

    def encode(self, text: str) -> list[int]:
        return [WORDS.index(w) if w in WORDS else len(WORDS) for w in text.split()]

    def decode(self, ids: list[int]) -> str:
        return "".join(f" {WORDS[i % len(WORDS)]}" for i in ids)


def find_local_tokenizer(*candidates: str | None) -> Path | None:
    """The first `tokenizer.json` among local paths (a model dir, the file itself, a config.json)."""
    for candidate in candidates:
        if not candidate:
            continue
        path = Path(candidate).expanduser()
        if path.name == "config.json":
            path = path.parent
        if path.is_dir():
            path = path / "tokenizer.json"
        if path.name == "tokenizer.json" and path.is_file():
            return path
    return None


def word_text(rng: random.Random, num_words: int) -> str:
    return "".join(f" {rng.choice(WORDS)}" for _ in range(num_words))


def exact_text(counter: TokenCounter, rng: random.Random, num_tokens: int) -> tuple[str, int]:
    """Text of `num_tokens` tokens (or the nearest count the tokenizer allows) and its count."""
    if num_tokens <= 0:
        return "", 0
    text = word_text(rng, num_tokens + 8)
    ids = counter.encode(text)
    while len(ids) < num_tokens + MAX_CUT_TRIES:  # every word is at least one token: grow
        text += word_text(rng, num_tokens - len(ids) + MAX_CUT_TRIES + 8)
        ids = counter.encode(text)
    best = ("", 0)
    # decoding a prefix and encoding it again can merge across the cut: try cuts near the target
    for offset in (0, 1, -1, 2, -2, 3)[:MAX_CUT_TRIES]:
        cut = num_tokens + offset
        if cut < 1:
            continue
        candidate = counter.decode(ids[:cut])
        count = len(counter.encode(candidate))
        if count == num_tokens:
            return candidate, count
        if not best[0] or abs(count - num_tokens) < abs(best[1] - num_tokens):
            best = (candidate, count)
    return best


class SegmentTexts:
    """Text per segment id, the same for every session that names the segment."""

    def __init__(self, counter: TokenCounter, salt: int) -> None:
        self.counter = counter
        self.salt = salt  # other salt, other text for the same ids
        self._texts: dict[int, tuple[str, int]] = {}

    def prepare(self, segments: Iterable[tuple[int, int]]) -> None:
        """Make every text before a run, so that no tokenizing happens on the run's clock."""
        for seg_id, num_tokens in segments:
            self._entry(seg_id, num_tokens)

    def text(self, seg_id: int, num_tokens: int) -> str:
        return self._entry(seg_id, num_tokens)[0]

    def num_tokens(self, seg_id: int, num_tokens: int) -> int:
        """Tokens the text really has (differs from the request only without an exact tokenizer
        or when no cut gives the exact count)."""
        return self._entry(seg_id, num_tokens)[1]

    def _entry(self, seg_id: int, num_tokens: int) -> tuple[str, int]:
        entry = self._texts.get(seg_id)
        if entry is None:
            rng = random.Random(self.salt * 1_000_003 + seg_id)
            entry = exact_text(self.counter, rng, num_tokens)
            self._texts[seg_id] = entry
        return entry
