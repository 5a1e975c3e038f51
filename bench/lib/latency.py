"""Latency percentiles by window, for ``bench/adclick.py``'s scale-out phase (pure)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence


def in_window(samples: Iterable[tuple[float, float]], start: float, end: float) -> list[float]:
    """The latencies of the ``(input produced at, latency)`` samples whose input was produced
    in ``[start, end)``."""
    return [latency for at, latency in samples if start <= at < end]


def percentile(values: Sequence[float], pct: int) -> float | None:
    """The ``pct``-th percentile (inclusive method), or None under two values."""
    if not 1 <= pct <= 99:
        raise ValueError(f"percentile must be within [1, 99], got {pct}")
    if len(values) < 2:
        return None
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]
