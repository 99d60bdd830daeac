"""Percentiles as vLLM's benchmark (numpy) computes them."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from kvwise.sim.metrics import _hist_percentile_s, percentile
from kvwise.sim.records import ITL_BINS_PER_E


def test_percentiles_interpolate_like_numpy() -> None:
    rng = random.Random(0)
    for size in (1, 2, 7, 100, 1001):
        values = sorted(rng.expovariate(1.0) for _ in range(size))
        for q in (0, 50, 90, 99, 100):
            assert percentile(values, q) == pytest.approx(
                float(np.percentile(values, q)), rel=1e-12
            )


def test_histogram_percentiles_are_within_the_bin_width() -> None:
    rng = random.Random(1)
    gaps = [rng.uniform(0.01, 0.05) for _ in range(5000)]
    hist: dict[int, int] = {}
    for gap in gaps:
        key = int(math.log(gap) * ITL_BINS_PER_E)
        hist[key] = hist.get(key, 0) + 1
    for q in (50, 99):
        assert _hist_percentile_s(hist, q) == pytest.approx(float(np.percentile(gaps, q)), rel=2e-3)
