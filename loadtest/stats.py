"""The one percentile every benchmark reports."""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 <= q < 1) of ``values``: of n values in order,
    the one at index ``floor(q * n)``, so p50 is the upper median and p99 of 100
    values the largest; NaN when there are none."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, math.floor(q * len(ordered)))]
