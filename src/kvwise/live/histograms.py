"""Prometheus histograms: cumulative bucket counts by upper bound, and quantiles of a window.

A quantile over the last minute is read from the difference of two scrapes' buckets, with
linear interpolation inside the bucket it falls in, as Prometheus' `histogram_quantile` does.
"""

from __future__ import annotations

import math
import re

_BUCKET = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)_bucket\{([^}]*)\}\s+(\S+)")
_LE = re.compile(r'le="([^"]*)"')

Buckets = dict[float, float]  # upper bound (inf for +Inf) -> cumulative count


def parse_buckets(text: str, names: tuple[str, ...]) -> dict[str, Buckets]:
    """The buckets of the named histograms, summed over their other labels (engines, models)."""
    found: dict[str, Buckets] = {}
    for line in text.splitlines():
        if "_bucket{" not in line:
            continue
        match = _BUCKET.match(line)
        if match is None or match.group(1) not in names:
            continue
        le = _LE.search(match.group(2))
        if le is None:
            continue
        try:
            bound, count = float(le.group(1)), float(match.group(3))
        except ValueError:
            continue
        buckets = found.setdefault(match.group(1), {})
        buckets[bound] = buckets.get(bound, 0.0) + count
    return found


def delta(after: Buckets, before: Buckets | None) -> Buckets:
    """Observations made between two scrapes (a restarted engine's counters start again)."""
    if before is None or any(after.get(b, 0.0) < c for b, c in before.items()):
        return dict(after)
    return {bound: count - before.get(bound, 0.0) for bound, count in after.items()}


def quantile(buckets: Buckets, q: float) -> float | None:
    """The q-quantile (0..1); None with no observations. Past the last finite bound: that bound."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, count
    return lower
