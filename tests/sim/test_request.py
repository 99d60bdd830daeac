"""Content identity of blocks: chained hashes of full blocks over segments."""

from __future__ import annotations

from kvwise.sim.request import ContentIds, Request
from tests.sim.factories import request

BLOCK = 4
CONTENT = ContentIds()  # one table for the whole module, as for one simulated run


def hashes(r: Request, num_blocks: int) -> list[int]:
    r.ensure_block_hashes(num_blocks, BLOCK, CONTENT)
    return r.block_hashes[:num_blocks]


def test_same_segments_same_hashes_whatever_follows() -> None:
    a = request(1, [(7, 8), (100, 5)])
    b = request(2, [(7, 8), (200, 5)])
    assert hashes(a, 2) == hashes(b, 2)  # the shared 8-token system prompt
    assert hashes(a, 3)[2] != hashes(b, 3)[2]  # the next block holds different text


def test_a_different_first_block_changes_every_later_hash() -> None:
    a = request(1, [(7, 4), (9, 8)])
    b = request(2, [(8, 4), (9, 8)])
    assert all(x != y for x, y in zip(hashes(a, 3), hashes(b, 3), strict=False))


def test_blocks_spanning_segments_match_only_the_same_split() -> None:
    a = request(1, [(7, 2), (9, 6)])
    b = request(2, [(7, 2), (9, 6)])
    c = request(3, [(7, 3), (9, 5)])
    assert hashes(a, 2) == hashes(b, 2)
    assert hashes(a, 1) != hashes(c, 1)


def test_the_answer_is_hashed_as_it_grows_and_matches_the_next_turn() -> None:
    first = request(1, [(7, 6)], output_len=10)
    first.num_output_tokens = 2  # 8 tokens: two full blocks
    grown = hashes(first, 2)
    first.num_output_tokens = 10  # 16 tokens: four
    later = hashes(first, 4)
    assert later[:2] == grown
    # the next turn sends the prompt, the answer and new text: its first blocks are the same
    turn2 = request(2, [(7, 6), (first.output_seg_id, 10), (55, 3)])
    assert hashes(turn2, 4) == later


def test_inherited_hashes_equal_fresh_ones() -> None:
    first = request(1, [(7, 5)], output_len=9)
    first.num_output_tokens = 9
    hashes(first, 3)
    fresh = request(2, [(7, 5), (first.output_seg_id, 9), (55, 6)])
    inherited = request(3, [(7, 5), (first.output_seg_id, 9), (55, 6)])
    inherited.inherit_block_hashes(first)
    assert hashes(inherited, 5) == hashes(fresh, 5)
