"""Bounded linear least squares: the one solver behind every fit of step-time coefficients.

    minimise ||A x - b||^2  subject to  x >= lower   (lower = 0: non-negative least squares)

`scipy.optimize.lsq_linear` with method "bvls" (Stark and Parker's bounded-variable least
squares, an active-set method that is exact on problems of a few unknowns). The columns are
scaled to unit norm first, so that terms of very different sizes (seconds per step next to the
efficiencies of microsecond roofline terms) do not ruin the conditioning. Only `kvwise
calibrate` imports this module (scipy: the `calibrate` extra, about 1 s to import).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import lsq_linear

TOLERANCE = 1e-12  # relative change of the cost at which bvls stops


def bounded_lsq(
    rows: Sequence[Sequence[float]],
    targets: Sequence[float],
    lower: Sequence[float] | None = None,
) -> list[float]:
    """The least-squares solution of rows @ x ~= targets with x >= lower (default 0)."""
    a = np.asarray(rows, dtype=float)
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    bound = np.zeros(a.shape[1]) if lower is None else np.asarray(lower, dtype=float)
    result = lsq_linear(
        a / norms,
        np.asarray(targets, dtype=float),
        bounds=(bound * norms, np.inf),
        method="bvls",
        tol=TOLERANCE,
    )
    return [float(v) for v in result.x / norms]


def nnls(rows: Sequence[Sequence[float]], targets: Sequence[float]) -> list[float]:
    """Non-negative least-squares solution of rows @ x ~= targets."""
    return bounded_lsq(rows, targets)
