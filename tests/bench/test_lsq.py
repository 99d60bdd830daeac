"""Non-negative least squares: exact on consistent systems, the constrained optimum otherwise."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from kvwise.bench.lsq import nnls


def _brute_force_nnls(rows: list[list[float]], targets: list[float]) -> np.ndarray:
    """The best least-squares solution over every choice of zeroed variables (tiny problems)."""
    a, b = np.array(rows), np.array(targets)
    best, best_cost = np.zeros(a.shape[1]), float(b @ b)
    for size in range(1, a.shape[1] + 1):
        for keep in itertools.combinations(range(a.shape[1]), size):
            x_keep, *_ = np.linalg.lstsq(a[:, keep], b, rcond=None)
            if (x_keep < 0).any():
                continue
            x = np.zeros(a.shape[1])
            x[list(keep)] = x_keep
            cost = float(np.sum((a @ x - b) ** 2))
            if cost < best_cost:
                best, best_cost = x, cost
    return best


def test_consistent_system_is_solved_exactly_across_scales() -> None:
    # columns as different as a step count and a microsecond roofline term
    rng = random.Random(0)
    truth = [5e-3, 400.0, 30.0]
    rows = [[rng.uniform(1, 50), rng.uniform(0, 1e-5), rng.uniform(0, 1e-4)] for _ in range(40)]
    targets = [sum(r * t for r, t in zip(row, truth, strict=True)) for row in rows]
    assert nnls(rows, targets) == pytest.approx(truth, rel=1e-6)


@pytest.mark.parametrize("seed", range(20))
def test_matches_the_constrained_optimum(seed: int) -> None:
    rng = random.Random(seed)
    rows = [[rng.gauss(0, 1) for _ in range(4)] for _ in range(12)]
    targets = [rng.gauss(0, 1) for _ in range(12)]
    x = nnls(rows, targets)
    assert min(x) >= 0
    assert x == pytest.approx(list(_brute_force_nnls(rows, targets)), abs=1e-9)
