"""One line per event a benchmark app processed: ``<partition> <processed at> <produced at>``.

Both times are wall-clock seconds since the epoch (the workers and the benchmark run on one
machine); "produced at" is the record's Kafka timestamp. The app appends a line as it processes
each event (line-buffered, so a worker killed with SIGKILL loses at most the line it was
writing); the benchmark reads every worker's file.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TextIO


def line(partition: int, processed_at: float, produced_at: float) -> str:
    return f"{partition} {processed_at:.4f} {produced_at:.4f}\n"


def open_for_append(path: Path) -> TextIO:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a", buffering=1, encoding="ascii")


def processing_times(paths: Iterable[Path]) -> dict[int, list[float]]:
    """Each partition's processing times, from every file, sorted; a torn line is skipped."""
    times: dict[int, list[float]] = {}
    for path in paths:
        try:
            text = path.read_text(encoding="ascii", errors="replace")
        except FileNotFoundError:
            continue
        for row in text.splitlines():
            fields = row.split()
            if len(fields) != 3:
                continue
            try:
                partition, processed_at = int(fields[0]), float(fields[1])
            except ValueError:
                continue
            times.setdefault(partition, []).append(processed_at)
    for values in times.values():
        values.sort()
    return times
