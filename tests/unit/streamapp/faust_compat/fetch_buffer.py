"""aiokafka's buffer of fetched records as the fetch loop's rounds read it (transport fixes 24
and 25): the fake fetcher that `test_partition_share` and `test_replica_share` share."""

from __future__ import annotations

import asyncio
from collections.abc import Set

from faust.types import TP

from streamapp.faust_compat.partition_share import Rotation, Round


class Buffer:
    """aiokafka's fetcher as its ``fetched_records`` drains it: each partition's records (or a
    fetch error) in the order they were fetched; up to ``max_records`` in all, only of the
    partitions asked for (all when the set is empty); a partition's position moves over what is
    taken only; an error is raised, and dropped, when it is reached with nothing taken, else
    left for the next call; with nothing to take, a call waits up to its timeout for more.

    Like a consumer, it owns the rotation its rounds go by (`round`)."""

    def __init__(self) -> None:
        self.held: dict[TP, list[int] | Exception] = {}
        self.arrived = asyncio.Event()
        self.rotation = Rotation()

    def fetched(self, tp: TP, count: int, start: int = 0) -> None:
        """``count`` records of ``tp`` (offsets from ``start``) after those it holds."""
        batch = self.held.get(tp)
        if not isinstance(batch, list):
            batch = self.held[tp] = []
        batch.extend(range(start, start + count))
        self.arrived.set()

    def failed(self, tp: TP, error: Exception) -> None:
        self.held[tp] = error

    def pending(self) -> list[tuple[TP, bool]]:
        return [(tp, isinstance(held, Exception)) for tp, held in self.held.items()]

    def has_error(self, tp: TP) -> bool:
        return isinstance(self.held.get(tp), Exception)

    def round(self) -> Round:
        """A new round of the fetch loop over this buffer, with the buffer's rotation."""
        return Round(self.fetch, self.pending, self.has_error, self.rotation)

    async def fetch(self, tps: Set[TP], timeout: float, max_records: int | None) -> dict:
        while True:
            drained = self._drain(tps, max_records)
            if drained or not timeout:
                return drained
            self.arrived.clear()
            await self.arrived.wait()

    def _drain(self, tps: Set[TP], max_records: int | None) -> dict[TP, list[int]]:
        drained: dict[TP, list[int]] = {}
        left = max_records
        for tp, held in list(self.held.items()):
            if tps and tp not in tps:
                continue
            if isinstance(held, Exception):
                if drained:
                    return drained
                del self.held[tp]
                raise held
            take = list(held) if left is None else held[:left]
            del held[: len(take)]
            if not held:
                del self.held[tp]
            if take:
                drained[tp] = take
            if left is not None:
                left -= len(take)
                if left == 0:
                    break
        return drained
