"""Non-negative least squares for a handful of unknowns, in plain Python (no numpy at run time).

    minimise ||A x - b||^2  subject to  x >= 0

Lawson and Hanson's active-set algorithm ("Solving Least Squares Problems", 1974, ch. 23), run
on the normal equations (A^T A, A^T b): with at most ten unknowns the Gram matrix is tiny, and
the columns are scaled to unit norm first so that terms of very different sizes (seconds per
step next to efficiencies of microsecond roofline terms) do not ruin the conditioning.
"""

from __future__ import annotations

import math

TOLERANCE = 1e-12
MAX_ITERATIONS = 100


def _solve(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting; a tiny ridge keeps singular systems solvable."""
    n = len(rhs)
    rows = [[*matrix[i], rhs[i]] for i in range(n)]
    scale = max((abs(matrix[i][i]) for i in range(n)), default=1.0) or 1.0
    for i in range(n):
        rows[i][i] += scale * 1e-12
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(col + 1, n):
            factor = rows[r][col] / rows[col][col]
            for c in range(col, n + 1):
                rows[r][c] -= factor * rows[col][c]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (rows[i][n] - sum(rows[i][c] * x[c] for c in range(i + 1, n))) / rows[i][i]
    return x


def _passive_solution(gram: list[list[float]], atb: list[float], passive: list[int]) -> list[float]:
    sub = [[gram[i][j] for j in passive] for i in passive]
    values = _solve(sub, [atb[i] for i in passive])
    z = [0.0] * len(atb)
    for index, value in zip(passive, values, strict=True):
        z[index] = value
    return z


def nnls_gram(gram: list[list[float]], atb: list[float]) -> list[float]:
    """Lawson-Hanson on the normal equations G x = A^T b, x >= 0."""
    n = len(atb)
    x = [0.0] * n
    passive: list[int] = []
    for _ in range(MAX_ITERATIONS):
        gradient = [atb[i] - sum(gram[i][j] * x[j] for j in range(n)) for i in range(n)]
        candidates = [i for i in range(n) if i not in passive and gradient[i] > TOLERANCE]
        if not candidates:
            break
        passive.append(max(candidates, key=lambda i: gradient[i]))
        while True:
            z = _passive_solution(gram, atb, sorted(passive))
            if all(z[i] > 0 for i in passive):
                x = z
                break
            # step back to the boundary: the first passive variable to reach zero leaves the set
            alpha = min(x[i] / (x[i] - z[i]) for i in passive if z[i] <= 0)
            x = [x[i] + alpha * (z[i] - x[i]) for i in range(n)]
            passive = [i for i in passive if x[i] > TOLERANCE]
    return x


def nnls(rows: list[list[float]], targets: list[float]) -> list[float]:
    """Non-negative least-squares solution of rows @ x ~= targets."""
    n = len(rows[0]) if rows else 0
    norms = [math.sqrt(sum(row[j] ** 2 for row in rows)) or 1.0 for j in range(n)]
    scaled = [[row[j] / norms[j] for j in range(n)] for row in rows]
    gram = [[sum(r[i] * r[j] for r in scaled) for j in range(n)] for i in range(n)]
    atb = [sum(r[i] * t for r, t in zip(scaled, targets, strict=True)) for i in range(n)]
    return [value / norm for value, norm in zip(nnls_gram(gram, atb), norms, strict=True)]
