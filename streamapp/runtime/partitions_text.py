"""Partitions in one log line: ``"orders 0-3, 7; totals-changelog 2"``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class Partition(Protocol):
    """Faust's TP and aiokafka's TopicPartition alike."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


def partitions_text(tps: Iterable[Partition]) -> str:
    """``"orders 0-3, 7; totals-changelog 2"`` (``"none"`` for none): partitions in one line.

    A set or list of partitions handed to the logger as an argument is drawn by Faust's log
    formatter as a "Topic Partition Set" table of several lines, which the log at INFO does not
    carry (`streamapp.quiet_logs`, docs/troubleshooting.md); such tables stay at DEBUG.
    """
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return "; ".join(f"{t} {_ranges(sorted(set(ps)))}" for t, ps in sorted(by_topic.items())) or (
        "none"
    )


def _ranges(numbers: list[int]) -> str:
    """``"0-3, 7"`` from ``[0, 1, 2, 3, 7]`` (sorted, distinct)."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
