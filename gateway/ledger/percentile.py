"""The one percentile: a stream's inter-token gaps (the record's ITL p99), the load generator's
and the benchmarks' latency percentiles."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile (q in 0–1) of `values` by linear interpolation between the two nearest
    ranks: position q·(n−1) in the sorted values, as ``numpy.quantile``'s default ("linear")
    and ``statistics.quantiles(method="inclusive")`` at their cut points. NaN when `values` is
    empty; the value itself when it is alone."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"percentile: q must be in 0–1, got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)
