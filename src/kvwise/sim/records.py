"""What the engine records as it runs: the step log (for fitting) and the ITL histogram."""

from __future__ import annotations

import math
from array import array

ITL_BINS_PER_E = 1000  # ITL histogram resolution: bins 0.1 % wide (key = int(ln(gap) * 1000))


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


class ItlBin:
    """The ITL histogram bin of the last step time, to skip the logarithm while step times stay
    well inside it (the key is the same as `int(log(gap) * ITL_BINS_PER_E)`)."""

    __slots__ = ("count", "hi", "key", "lo")

    def __init__(self) -> None:
        self.count, self.key, self.lo, self.hi = 0, 0, 1.0, 0.0  # empty interval

    def start(self, gap_s: float) -> None:
        self.key = int(math.log(gap_s) * ITL_BINS_PER_E) if gap_s > 0 else -(10**9)
        # a margin inside the bin's edges keeps rounding of exp/log from deciding the key
        self.lo = math.exp((self.key + 0.01) / ITL_BINS_PER_E)
        self.hi = math.exp((self.key + 0.99) / ITL_BINS_PER_E)
        if not self.lo <= gap_s < self.hi:
            self.lo, self.hi = gap_s, math.nextafter(gap_s, math.inf)  # this value only

    def flush(self, hist: dict[int, int]) -> None:
        if self.count:
            hist[self.key] = hist.get(self.key, 0) + self.count
            self.count = 0
