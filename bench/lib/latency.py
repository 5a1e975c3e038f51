"""Latency percentiles by window, for ``bench/adclick.py``'s scale-out phase (pure)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple


class Sample(NamedTuple):
    """One attribution: when its later input was produced (s), its latency (ms), and the join
    partition it went through (its click's, which is its impression's: co-partitioned)."""

    at: float
    ms: float
    partition: int


def in_window(samples: Iterable[Sequence[float]], start: float, end: float) -> list[float]:
    """The latencies of the ``(input produced at, latency, ...)`` samples whose input was
    produced in ``[start, end)``."""
    return [s[1] for s in samples if start <= s[0] < end]


def percentile(values: Sequence[float], pct: int) -> float | None:
    """The ``pct``-th percentile (inclusive method), or None under two values."""
    if not 1 <= pct <= 99:
        raise ValueError(f"percentile must be within [1, 99], got {pct}")
    if len(values) < 2:
        return None
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


def moved_partitions(before: Mapping[int, str], after: Mapping[int, str]) -> set[int]:
    """The partitions whose owner after the scale-out is not their owner before it (a partition
    owned by nobody on either side counts as moved)."""
    return {p for p in set(before) | set(after) if before.get(p) != after.get(p)}


@dataclass(frozen=True)
class Side:
    """The latencies of one kind of partition (moved or stayed) in one window."""

    count: int
    p99_ms: float | None
    max_ms: float | None


def side(samples: Iterable[Sample], partitions: set[int], moved: bool) -> Side:
    """The samples of the moved partitions (``moved``) or of the others."""
    values = [s.ms for s in samples if (s.partition in partitions) == moved]
    return Side(len(values), percentile(values, 99), max(values) if values else None)


@dataclass(frozen=True)
class Second:
    """One second of a window: its offset from the window's start, and each kind's samples."""

    offset_s: int
    stayed: Side
    moved: Side


def timeline(samples: Iterable[Sample], start: float, end: float, moved: set[int]) -> list[Second]:
    """The window ``[start, end)`` second by second (by input time), moved and stayed apart."""
    buckets: list[list[Sample]] = [[] for _ in range(max(0, math.ceil(end - start)))]
    for s in samples:
        if start <= s.at < end:
            buckets[int(s.at - start)].append(s)
    return [
        Second(i, side(bucket, moved, moved=False), side(bucket, moved, moved=True))
        for i, bucket in enumerate(buckets)
    ]


def over(samples: Iterable[Sample], start: float, end: float, limit_ms: float) -> list[Sample]:
    """The samples of ``[start, end)`` slower than ``limit_ms``, by input time."""
    return sorted(s for s in samples if start <= s.at < end and s.ms > limit_ms)
