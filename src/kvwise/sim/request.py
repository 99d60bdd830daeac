"""A request inside the simulated engine, and the content identity of its tokens.

Tokens are never materialised one by one. A request's sequence is a list of *segments*
`(seg_id, num_tokens)`: runs of tokens whose content is named by `seg_id` (a system prompt, a
user turn, a tool output, a model answer). Two requests share a block's content exactly when the
block covers the same pieces of the same segments after the same chain of earlier blocks, which
is what vLLM's prefix cache checks with its chained hash of full blocks.

Where vLLM hashes that chain, the simulator numbers it: `ContentIds` gives each distinct
(parent, pieces) key the next small integer, so that equal contents get equal ids (exactly, no
collisions) and the pool can keep its prefix-cache map in a list indexed by id.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

Segment = tuple[int, int]  # (seg_id, num_tokens)

ROOT_HASH: Final = 0  # parent of a sequence's first block (vLLM: NONE_HASH); block ids start at 1


class ContentIds:
    """Block contents numbered 1, 2, ... in order of first sight; one table per simulated run."""

    __slots__ = ("ids",)

    def __init__(self) -> None:
        self.ids: dict[tuple[int, object, int], int] = {}

    def __len__(self) -> int:
        return len(self.ids)


class Status(IntEnum):
    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED = 3
    REJECTED = 4


class Request:
    """One request's scheduling state; times in simulated seconds, counts in tokens."""

    __slots__ = (
        "arrival_s",
        "arrival_step",
        "block_hashes",
        "block_ids",
        "finish_s",
        "first_scheduled_s",
        "first_token_s",
        "first_token_step",
        "hash_off",
        "hash_seg",
        "is_shareable",
        "last_step",
        "last_token_s",
        "lookup_hits",
        "lookup_num_evictions",
        "max_tokens",
        "num_cached_blocks",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_output_tokens",
        "num_preemptions",
        "num_prompt_tokens",
        "output_len",
        "output_seg_id",
        "owner",
        "prompt",
        "request_id",
        "running_seq",
        "sent_s",
        "status",
        "synced_step",
    )

    def __init__(
        self,
        request_id: int,
        prompt: list[Segment],
        max_tokens: int,
        *,
        output_seg_id: int,  # (first of the keyword-only ones: mypyc needs the defaults last)
        output_len: int | None = None,
        sent_s: float = 0.0,
        arrival_s: float = 0.0,
        owner: object = None,
        is_shareable: bool = True,
    ) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.num_prompt_tokens = sum([n for _, n in prompt])
        self.max_tokens = max_tokens  # as sent: vLLM rejects prompt + max_tokens > max_model_len
        # tokens it will generate before stopping (EOS or max_tokens); workloads decide it
        self.output_len = max_tokens if output_len is None else min(output_len, max_tokens)
        self.output_seg_id = output_seg_id
        self.sent_s = sent_s  # when the client sent it: TTFT and E2E count from here
        self.arrival_s = arrival_s  # when the engine could first see it (after the API server)
        self.owner = owner  # the workload's handle (session), returned on completion
        # whether another request may contain its tokens (a shared system prompt, a session's
        # next turn); if not, its blocks enter the prefix cache only when it is preempted,
        # the one time it could look them up itself
        self.is_shareable = is_shareable
        self.status = Status.WAITING
        self.num_output_tokens = 0
        self.num_computed_tokens = 0
        self.num_preemptions = 0
        self.num_cached_tokens = 0  # prefix-cache hit at first admission (vLLM's field)
        self.block_ids: list[int] = []
        self.block_hashes: list[int] = []
        self.num_cached_blocks = 0  # leading block_ids already registered in the prefix cache
        self.hash_seg = 0  # cursor of the next block to hash: segment index and offset
        self.hash_off = 0
        self.first_scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.last_token_s = 0.0
        self.finish_s = 0.0
        self.arrival_step = 0  # index of the first engine step that could see it
        self.first_token_step = 0
        self.last_step = 0  # the step that produced its last token so far
        self.running_seq = 0  # admission order: position key in the running list
        # memo of the last prefix-cache lookup: the hit blocks, and the pool's eviction count
        # then (-1: no memo); while the count is unchanged, every hit is still cached
        self.lookup_hits: list[int] = []
        self.lookup_num_evictions = -1
        self.synced_step = 0  # decode cohort: step at which the counters above were exact

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens (vLLM's `request.num_tokens`)."""
        return self.num_prompt_tokens + self.num_output_tokens

    def segment(self, index: int) -> Segment:
        """The sequence's segments: the prompt's, then the output generated so far."""
        if index < len(self.prompt):
            return self.prompt[index]
        assert index == len(self.prompt), "hashing past the end of the sequence"
        return (self.output_seg_id, self.num_output_tokens)

    def inherit_block_hashes(self, previous: Request) -> None:
        """Start from the hashes of a previous request whose whole sequence (prompt, then
        answer) begins this one, as a session's next turn does; the segment indices match."""
        self.block_hashes = list(previous.block_hashes)
        self.hash_seg, self.hash_off = previous.hash_seg, previous.hash_off

    def ensure_block_hashes(self, num_blocks: int, block_size: int, content: ContentIds) -> None:
        """Name full blocks up to `num_blocks`, lazily, chaining each on its parent.

        A block inside one segment is (parent, seg_id, offset); a block across segments is
        (parent, its pieces, -1). Runs of blocks inside one segment are named in one loop.
        """
        ids = content.ids
        hashes = self.block_hashes
        missing = num_blocks - len(hashes)
        parent = hashes[-1] if hashes else ROOT_HASH
        while missing > 0:
            seg_index, offset = self.hash_seg, self.hash_off
            seg_id, length = self.segment(seg_index)
            while offset >= length:  # start at the first token not hashed yet
                seg_index, offset = seg_index + 1, 0
                seg_id, length = self.segment(seg_index)
            run = min(missing, (length - offset) // block_size)
            if run:
                for _ in range(run):
                    parent = ids.setdefault((parent, seg_id, offset), len(ids) + 1)
                    hashes.append(parent)
                    offset += block_size
                self.hash_seg, self.hash_off = seg_index, offset
                missing -= run
            else:
                self.hash_seg, self.hash_off = seg_index, offset
                pieces = self._spanning_block(block_size)
                parent = ids.setdefault((parent, pieces, -1), len(ids) + 1)
                hashes.append(parent)
                missing -= 1

    def _spanning_block(self, block_size: int) -> tuple[tuple[int, int, int], ...]:
        """The next block, which starts at the cursor and runs into later segments."""
        seg_index, offset = self.hash_seg, self.hash_off
        pieces: list[tuple[int, int, int]] = []
        need = block_size
        while need:
            seg_id, length = self.segment(seg_index)
            if offset >= length:  # move on only when more tokens are needed: the last
                seg_index, offset = seg_index + 1, 0  # segment (the answer) may still grow
                continue
            take = min(length - offset, need)
            pieces.append((seg_id, offset, take))
            need -= take
            offset += take
        self.hash_seg, self.hash_off = seg_index, offset
        return tuple(pieces)

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id}, {self.status.name}, prompt={self.num_prompt_tokens}, "
            f"out={self.num_output_tokens}/{self.output_len}, computed={self.num_computed_tokens})"
        )
