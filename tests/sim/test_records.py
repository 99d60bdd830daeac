"""The ITL bin cache gives every gap the histogram key the logarithm would give it."""

from __future__ import annotations

import math
import random

from kvwise.sim.records import ITL_BINS_PER_E, ItlBin


def key_of(gap_s: float) -> int:
    return int(math.log(gap_s) * ITL_BINS_PER_E) if gap_s > 0 else -(10**9)


def test_cached_bins_give_the_logarithms_key_for_growing_and_jumping_gaps() -> None:
    rng = random.Random(1)
    gaps = [0.02 * (1 + 0.0004 * i) for i in range(3000)]  # step times growing with the context
    gaps += [rng.uniform(0.0005, 3.0) for _ in range(3000)]  # anywhere, both sides of 1 s
    gaps += [math.exp(k / ITL_BINS_PER_E) for k in range(-5, 6)]  # exactly on edges, near 0
    gaps += [0.0, 0.998, 0.999, 0.9995, 1.0, 1.0005, 1.001, 1.002, 1.0, 0.999, 0.998, 0.997]
    gaps += [0.03 * (1 - 0.0004 * i) for i in range(3000)]  # shrinking step times
    itl, hist = ItlBin(), {}
    for gap_s in gaps:
        if not itl.lo <= gap_s < itl.hi:
            itl.flush(hist)
            itl.start(gap_s)
        assert itl.key == key_of(gap_s), gap_s
        itl.count += 1
    itl.flush(hist)
    expected: dict[int, int] = {}
    for gap_s in gaps:
        expected[key_of(gap_s)] = expected.get(key_of(gap_s), 0) + 1
    assert hist == expected


def test_a_bin_is_reused_while_step_times_stay_inside_it() -> None:
    itl = ItlBin()
    gap_s = math.exp(-3912.5 / ITL_BINS_PER_E)  # about 20 ms, mid-bin
    itl.start(gap_s)
    assert itl.key == -3912
    assert itl.is_bin and itl.lo <= gap_s * 1.0002 < itl.hi  # 0.02 % longer: the same bin
    itl.start(gap_s * math.exp(1 / ITL_BINS_PER_E))  # one bin up, by one multiplication
    assert itl.key == -3911 and itl.is_bin
    itl.start(gap_s)  # and back down, by one division
    assert itl.key == -3912 and itl.is_bin
