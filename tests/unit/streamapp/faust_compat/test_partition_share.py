"""Transport fix 25: a round of the fetch loop takes at most a share of each partition's
fetched records, so a gained partition's backlog does not hold up the partitions kept."""

from __future__ import annotations

from collections.abc import Set

import pytest
from faust.types import TP

from streamapp.faust_compat.partition_share import (
    RECORDS_PER_PARTITION_PER_ROUND,
    take_per_partition,
)
from streamapp.faust_compat.replica_share import fetch_streams_first

GAINED = TP("sa-fair-events", 0)
KEPT = TP("sa-fair-events", 1)
FAILING = TP("sa-fair-events", 2)
REPLICA = TP("sa-fair-latest-changelog", 0)


class Buffer:
    """aiokafka's fetcher as its ``fetched_records`` drains it: each partition's records (or a
    fetch error) in the order they were fetched; up to ``max_records`` in all, from the
    partitions asked for; a partition's position moves over what is taken only; an error is
    raised, and dropped, when it is reached with nothing taken, else left for the next call."""

    def __init__(self) -> None:
        self.held: dict[TP, list[int] | Exception] = {}

    def fetched(self, tp: TP, count: int) -> None:
        self.held[tp] = list(range(count))

    def failed(self, tp: TP, error: Exception) -> None:
        self.held[tp] = error

    def pending(self) -> list[tuple[TP, bool]]:
        return [(tp, isinstance(held, Exception)) for tp, held in self.held.items()]

    async def fetch(self, tps: Set[TP], timeout: float, max_records: int | None) -> dict:
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


async def test_a_kept_partition_s_records_go_out_in_the_round_that_finds_them() -> None:
    buffer = Buffer()
    buffer.fetched(GAINED, 1_000)  # the backlog of a partition just gained, fetched first
    buffer.fetched(KEPT, 5)
    first = await fetch_streams_first(
        buffer.fetch, buffer.pending, {GAINED, KEPT}, set(), 1.0, None
    )
    assert first[KEPT] == [0, 1, 2, 3, 4]
    assert first[GAINED] == list(range(RECORDS_PER_PARTITION_PER_ROUND))
    # The backlog goes on in the rounds that follow, in order, nothing lost or repeated.
    taken = first[GAINED]
    while GAINED in buffer.held:
        more = await fetch_streams_first(
            buffer.fetch, buffer.pending, {GAINED, KEPT}, set(), 1.0, None
        )
        assert len(more[GAINED]) <= RECORDS_PER_PARTITION_PER_ROUND
        taken += more[GAINED]
    assert taken == list(range(1_000))


async def test_a_share_counts_what_the_round_took_of_the_partition_already() -> None:
    buffer = Buffer()
    buffer.fetched(GAINED, 100)
    records = {GAINED: [-2, -1]}
    added = await take_per_partition(
        buffer.fetch, buffer.pending, {GAINED}, records, per_partition=10, most=None
    )
    assert added == 8 and records[GAINED] == [-2, -1, *range(8)]


async def test_a_fetch_error_waits_for_a_round_that_took_nothing_before_it() -> None:
    buffer = Buffer()
    buffer.fetched(KEPT, 3)
    buffer.failed(FAILING, RuntimeError("offset out of range"))
    partitions = {KEPT, FAILING}
    # The records taken before it are handed out; aiokafka would drop the error as it raised.
    first = await fetch_streams_first(buffer.fetch, buffer.pending, partitions, set(), 1.0, None)
    assert first == {KEPT: [0, 1, 2]}
    with pytest.raises(RuntimeError, match="offset out of range"):
        await fetch_streams_first(buffer.fetch, buffer.pending, partitions, set(), 1.0, None)


async def test_a_replica_s_fetch_error_never_costs_the_stream_records_taken() -> None:
    # Fix 24 took the replicas' share in one call after the streams': an error reached there
    # with nothing taken in that call was raised, and the round's stream records, which
    # aiokafka's position had passed, were never handed out.
    buffer = Buffer()
    buffer.fetched(KEPT, 3)
    buffer.failed(REPLICA, RuntimeError("not leader"))
    partitions = {KEPT, REPLICA}
    first = await fetch_streams_first(
        buffer.fetch, buffer.pending, partitions, {REPLICA}, 1.0, None
    )
    assert first == {KEPT: [0, 1, 2]}
    with pytest.raises(RuntimeError, match="not leader"):
        await fetch_streams_first(buffer.fetch, buffer.pending, partitions, {REPLICA}, 1.0, None)
