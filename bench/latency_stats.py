"""Summary statistics of a list of durations (nearest-rank percentiles, as the README table reports them)."""

from __future__ import annotations

import math


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def summarize(values: list[float]) -> dict:
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "p50": percentile(ordered, 50),
        "p95": percentile(ordered, 95),
        "max": ordered[-1] if ordered else None,
    }
