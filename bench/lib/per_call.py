"""Side-by-side per-call timings in one process, for the codec micro-benchmarks
(``bench/table_codecs.py``, ``bench/send_codecs.py``): each case timed on both sides in
alternating rounds, the best of the rounds kept (on a busy machine the best is the least
disturbed), printed as a table with the ratio."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

#: A case: its name, the call to time on each side, and the one argument both are called with
#: (called as it is, not through a wrapper, whose cost would count in the smallest cases).
Case = tuple[str, Callable[[Any], Any], Callable[[Any], Any], Any]


def per_call_us(fn: Callable[[Any], Any], arg: Any, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(arg)
    return (time.perf_counter() - start) / calls * 1e6


def best_of_rounds(
    cases: Sequence[Case], *, rounds: int, calls: int
) -> dict[str, tuple[float, float]]:
    """Case name -> (best µs of the first side, best µs of the second), sides alternating."""
    best: dict[str, list[float]] = {name: [float("inf"), float("inf")] for name, *_ in cases}
    for _ in range(rounds):
        for name, first, second, arg in cases:
            for side, fn in enumerate((first, second)):
                best[name][side] = min(best[name][side], per_call_us(fn, arg, calls))
    return {name: (sides[0], sides[1]) for name, sides in best.items()}


def print_table(
    best: dict[str, tuple[float, float]],
    header: tuple[str, str, str],
    *,
    rounds: int,
    calls: int,
    ratio_digits: int,
) -> None:
    """``header``: the case column's title, then each side's."""
    width = max(len(header[0]), *(len(name) for name in best)) + 2
    print(f"per call, best of {rounds} alternating rounds of {calls:,} calls")
    print(f"{header[0]:<{width}} {header[1]:>16} {header[2]:>16} {'ratio':>7}")
    for name, (before, after) in best.items():
        print(
            f"{name:<{width}} {before:>16.2f} {after:>16.2f} {before / after:>6.{ratio_digits}f}x"
        )
