"""What the engine records as it runs: the step log (for fitting) and the ITL histogram."""

from __future__ import annotations

import math
from array import array
from typing import Final

ITL_BINS_PER_E: Final = (
    1000  # ITL histogram resolution: bins 0.1 % wide (key = int(ln(gap) * 1000))
)


class StepLog:
    """Per-step token counts and start times, kept only when fitting step-time coefficients."""

    __slots__ = ("context", "pairs_x2", "reqs", "start_s", "tokens")

    def __init__(self) -> None:
        self.tokens, self.pairs_x2 = array("q"), array("q")
        self.context, self.reqs = array("q"), array("q")
        self.start_s = array("d")

    def add(self, start_s: float, tokens: int, pairs_x2: int, context: int, reqs: int) -> None:
        self.start_s.append(start_s)
        self.tokens.append(tokens)
        self.pairs_x2.append(pairs_x2)
        self.context.append(context)
        self.reqs.append(reqs)


NEXT_BIN: Final = math.exp(1 / ITL_BINS_PER_E)  # ratio of consecutive bin edges


class ItlBin:
    """The ITL histogram bin of the last step time, to skip the logarithm while step times stay
    inside it or move to a neighbouring bin (as they do while the context grows).

    The key is `int(log(gap) * ITL_BINS_PER_E)`, truncated toward zero: bin k > 0 holds
    log(gap) * ITL_BINS_PER_E in [k, k + 1), bin k < 0 in (k - 1, k], bin 0 in (-1, 1).
    `lo`/`hi` keep a margin inside those edges, so that rounding never decides a key.
    """

    __slots__ = ("count", "hi", "is_bin", "key", "lo")

    def __init__(self) -> None:
        self.count, self.key, self.lo, self.hi = 0, 0, 1.0, 0.0  # empty interval
        self.is_bin = False  # lo/hi are a bin's edges (not one value's)

    def start(self, gap_s: float) -> None:
        # try the neighbouring bins first: their edges by one product (bin 0 spans two widths)
        if self.is_bin and self.key != 0:
            lo, hi = self.lo * NEXT_BIN, self.hi * NEXT_BIN
            if lo <= gap_s < hi:
                self.key, self.lo, self.hi = self.key + 1, lo, hi
                return
            lo, hi = self.lo / NEXT_BIN, self.hi / NEXT_BIN
            if lo <= gap_s < hi:
                self.key, self.lo, self.hi = self.key - 1, lo, hi
                return
        if gap_s <= 0:
            self.key, self.lo, self.hi = -(10**9), gap_s, math.nextafter(gap_s, math.inf)
            self.is_bin = False
            return
        key = int(math.log(gap_s) * ITL_BINS_PER_E)
        low_edge = key if key > 0 else key - 1 if key < 0 else -1
        high_edge = key + 1 if key >= 0 else key
        self.key = key
        self.lo = math.exp((low_edge + 0.01) / ITL_BINS_PER_E)
        self.hi = math.exp((high_edge - 0.01) / ITL_BINS_PER_E)
        self.is_bin = self.lo <= gap_s < self.hi
        if not self.is_bin:  # within the margin of an edge: this value only
            self.lo, self.hi = gap_s, math.nextafter(gap_s, math.inf)

    def flush(self, hist: dict[int, int]) -> None:
        if self.count:
            hist[self.key] = hist.get(self.key, 0) + self.count
            self.count = 0
