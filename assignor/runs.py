"""Per-member runs of a holder array: who holds which partitions of one group.

A holder array gives, per partition of a group, the member index holding it
(-1: nobody). `runs_by_member` turns it into member -> its partitions
ascending with one stable sort of the partition numbers by holder (each
member's partitions then form one ascending run) and `groupby` to cut the
runs: both in C, instead of one Python-level append per task.
"""

from __future__ import annotations

from itertools import groupby

__all__ = ["runs_by_member"]


def runs_by_member(holder: list[int], *, keep_unowned: bool = False) -> dict[int, list[int]]:
    """member -> its partitions ascending; -1 -> the unheld ones when ``keep_unowned``."""
    order = sorted(range(len(holder)), key=holder.__getitem__)
    runs = {m: list(run) for m, run in groupby(order, holder.__getitem__)}
    if not keep_unowned:
        runs.pop(-1, None)
    return runs
