"""How a long conversation is cut to fit the context: the policy the gateway applies and the
simulator models, defined once.

Cutting just enough to fit shifts the prompt's start every turn, so vLLM's prefix cache misses
everything after the system prompt and each turn is recomputed in full. Cutting down to a low-
water mark instead (half the budget by default) keeps the start fixed for the next turns, which
then extend a cached prefix until the budget is reached again. The cut is a function of the
history alone (replayed from the first turn), so a gateway needs no extra state to keep it.
"""

from __future__ import annotations

from collections.abc import Sequence

TRIM_LOW_WATER = 0.5  # after a cut, the kept history is at most this share of the budget


def stable_cut(costs: Sequence[int], budget: int, low_water: float = TRIM_LOW_WATER) -> int:
    """How many of the oldest units to drop (units in order, each with its token cost).

    Walks the history as it grew: whenever the kept window passes `budget`, the oldest units go
    until it is at most `low_water x budget`. The newest unit always stays. With low_water 1 this
    is "drop the oldest until the rest fits"."""
    if not 0 < low_water <= 1:
        raise ValueError(f"low_water must be in (0, 1], got {low_water}")
    cut, window = 0, 0
    for index, cost in enumerate(costs):
        window += cost
        if window > budget:
            while cut < index and window > budget * low_water:
                window -= costs[cut]
                cut += 1
    return cut
