"""The "stopped" measure of ``bench/rebalance.py``: how long a partition that did not move went
without processing during a step.

Pure functions over what the benchmark gathered: each processed event's partition and wall time
(from the workers' processed logs, `bench.lib.processed_log`), and who owned each partition
before the step, after it and at every rebalance in between (the workers'
``/streamapp/assignment`` views and their histories).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise


def longest_gap(times: Iterable[float], start: float, end: float) -> float:
    """The longest stretch of ``[start, end]`` with no processed event in it.

    The stretches are between consecutive events inside the window, and from the window's start
    to its first event and from its last event to the window's end: a partition that processed
    nothing in the window stood still for all of it. Raw: a steady stream at ``r`` events/s has
    gaps of ``1/r`` s while nothing stops.
    """
    return longest_gap_from(times, start, end)[0]


def longest_gap_from(times: Iterable[float], start: float, end: float) -> tuple[float, float]:
    """`longest_gap` and where it begins: ``(seconds, began at)``, to line it up with the
    workers' logs."""
    if end < start:
        raise ValueError(f"the window ends ({end}) before it starts ({start})")
    inside = sorted(t for t in times if start <= t <= end)
    edges = [start, *inside, end]
    return max(((later - earlier, earlier) for earlier, later in pairwise(edges)), key=_first)


def _first(pair: tuple[float, float]) -> float:
    return pair[0]


def unmoved(
    before: Mapping[int, str],
    after: Mapping[int, str],
    held_between: Iterable[tuple[str, Iterable[int]]] = (),
    interrupted: Iterable[str] = (),
) -> set[int]:
    """The partitions that did not move in a step.

    ``before`` and ``after``: each partition's owner (a worker's name) before and after the step;
    ``held_between``: (worker, partitions it held as actives) at each rebalance in between;
    ``interrupted``: the workers the step stopped, killed or restarted. A partition did not move
    when one worker owned it before, after and at every rebalance in between, and that worker
    ran throughout the step.
    """
    stopped_workers = set(interrupted)
    owners = {p: owner for p, owner in before.items() if after.get(p) == owner}
    for worker, partitions in held_between:
        for p in partitions:
            if p in owners and owners[p] != worker:
                del owners[p]
    return {p for p, owner in owners.items() if owner not in stopped_workers}


@dataclass(frozen=True)
class Stopped:
    """The longest time a partition that did not move went without processing, in one step."""

    seconds: float | None  # None: no partition stayed where it was
    partition: int | None  # the partition that stood still longest
    unmoved: int  # how many partitions did not move
    began: float | None = None  # wall time the longest gap began (None: none measured)

    def text(self) -> str:
        return "-" if self.seconds is None else f"{self.seconds:.2f}"


def stopped(
    processed: Mapping[int, Sequence[float]],
    partitions: Iterable[int],
    start: float,
    end: float,
) -> Stopped:
    """The longest gap (`longest_gap`) of any of ``partitions`` in ``[start, end]``.

    ``processed``: each partition's processing times (a partition missing from it processed
    nothing).
    """
    chosen = sorted(set(partitions))
    if not chosen:
        return Stopped(None, None, 0)
    gaps = {p: longest_gap_from(processed.get(p, ()), start, end) for p in chosen}
    worst = max(gaps, key=lambda p: gaps[p][0])
    return Stopped(gaps[worst][0], worst, len(chosen), gaps[worst][1])


def worst(*steps: Stopped) -> Stopped:
    """One figure for several windows of one step (the rolling restart's three): the worst."""
    measured = [s for s in steps if s.seconds is not None]
    if not measured:
        return Stopped(None, None, max((s.unmoved for s in steps), default=0))
    top = max(measured, key=lambda s: s.seconds or 0.0)
    return Stopped(top.seconds, top.partition, min(s.unmoved for s in measured), top.began)
