"""Transport fix 25: a round of the fetch loop takes at most a share of each partition's
fetched records and a bound in all, split evenly, so the backlogs of gained partitions do not
hold up the partitions kept."""

from __future__ import annotations

from collections.abc import Set

import pytest
from faust.types import TP

from streamapp.faust_compat.partition_share import (
    RECORDS_PER_PARTITION_PER_ROUND,
    RECORDS_PER_ROUND,
    Round,
    take_per_partition,
)
from streamapp.faust_compat.replica_share import fetch_streams_first
from tests.unit.streamapp.faust_compat.fetch_buffer import Buffer

GAINED = TP("sa-fair-events", 0)
KEPT = TP("sa-fair-events", 1)
FAILING = TP("sa-fair-events", 2)
REPLICA = TP("sa-fair-latest-changelog", 0)


async def test_a_kept_partition_s_records_go_out_in_the_round_that_finds_them() -> None:
    buffer = Buffer()
    buffer.fetched(GAINED, 1_000)  # the backlog of a partition just gained, fetched first
    buffer.fetched(KEPT, 5)
    first = await fetch_streams_first(buffer.round(), {GAINED, KEPT}, set(), 1.0, None)
    assert first[KEPT] == [0, 1, 2, 3, 4]
    assert first[GAINED] == list(range(RECORDS_PER_PARTITION_PER_ROUND))
    # The backlog goes on in the rounds that follow, in order, nothing lost or repeated.
    taken = first[GAINED]
    while GAINED in buffer.held:
        more = await fetch_streams_first(buffer.round(), {GAINED, KEPT}, set(), 1.0, None)
        assert len(more[GAINED]) <= RECORDS_PER_PARTITION_PER_ROUND
        taken += more[GAINED]
    assert taken == list(range(1_000))


async def test_a_share_counts_what_the_round_took_of_the_partition_already() -> None:
    buffer = Buffer()
    buffer.fetched(GAINED, 100)
    round_ = buffer.round()
    round_.records[GAINED] = [-2, -1]
    added = await take_per_partition(round_, {GAINED}, per_partition=10, most=None)
    assert added == 8 and round_.records[GAINED] == [-2, -1, *range(8)]


async def test_a_fetch_error_is_raised_by_a_round_before_it_takes_any_records() -> None:
    buffer = Buffer()
    buffer.fetched(KEPT, 3)
    buffer.failed(FAILING, RuntimeError("offset out of range"))
    partitions = {KEPT, FAILING}
    # Raised first, wherever the round would start: the records stay for the next round
    # (aiokafka drops the error as it raises it).
    with pytest.raises(RuntimeError, match="offset out of range"):
        await fetch_streams_first(buffer.round(), partitions, set(), 1.0, None)
    again = await fetch_streams_first(buffer.round(), partitions, set(), 1.0, None)
    assert again == {KEPT: [0, 1, 2]}


async def test_an_error_fetched_after_a_round_took_records_waits_for_the_next() -> None:
    buffer = Buffer()
    buffer.fetched(GAINED, 1_000)
    buffer.fetched(KEPT, 1_000)
    real_fetch = buffer.fetch
    errors = iter([RuntimeError("not leader")])

    async def fetch(tps: Set[TP], timeout: float, max_records: int | None) -> dict:
        taken = await real_fetch(tps, timeout, max_records)
        # The fetcher's next response arrives as the first partition's share is taken: an
        # error for the partition the round has not finished taking.
        error = next(errors, None)
        if error is not None:
            (other,) = {GAINED, KEPT} - set(tps)
            buffer.held.pop(other)
            buffer.failed(other, error)
        return taken

    round_ = Round(fetch, buffer.pending, buffer.has_error, buffer.rotation)
    await take_per_partition(round_, {GAINED, KEPT}, per_partition=1_000, most=RECORDS_PER_ROUND)
    # The round's records are handed out: the first partition's, which took the whole bound.
    ((taken, batch),) = round_.records.items()
    assert batch == list(range(RECORDS_PER_ROUND)) and buffer.pending() == [
        (taken, False),
        ({GAINED, KEPT}.difference({taken}).pop(), True),
    ]
    with pytest.raises(RuntimeError, match="not leader"):
        await take_per_partition(
            buffer.round(), {GAINED, KEPT}, per_partition=1_000, most=RECORDS_PER_ROUND
        )


async def test_a_replica_s_fetch_error_never_costs_the_stream_records_taken() -> None:
    # Fix 24 took the replicas' share in one call after the streams': an error reached there
    # with nothing taken in that call was raised, and the round's stream records, which
    # aiokafka's position had passed, were never handed out.
    buffer = Buffer()
    buffer.fetched(KEPT, 3)
    buffer.failed(REPLICA, RuntimeError("not leader"))
    partitions = {KEPT, REPLICA}
    first = await fetch_streams_first(buffer.round(), partitions, {REPLICA}, 1.0, None)
    assert first == {KEPT: [0, 1, 2]}
    with pytest.raises(RuntimeError, match="not leader"):
        await fetch_streams_first(buffer.round(), partitions, {REPLICA}, 1.0, None)


def backlogs(buffer: Buffer, topic: str, partitions: int, each: int) -> set[TP]:
    tps = {TP(topic, p) for p in range(partitions)}
    for tp in sorted(tps):
        buffer.fetched(tp, each)
    return tps


async def test_a_round_takes_a_bound_in_all_split_over_the_partitions_with_records() -> None:
    # A rolling restart's worker catching up on six events partitions at once held up the
    # ticks of the partitions it kept for a round of 50 of each: 300 records, up to 1.8 s.
    buffer = Buffer()
    caught_up = backlogs(buffer, "sa-fair-events", 6, 1_000)
    kept = TP("sa-fair-ticks", 0)
    buffer.fetched(kept, 2)
    records = await fetch_streams_first(buffer.round(), caught_up | {kept}, set(), 1.0, None)
    assert records[kept] == [0, 1]
    assert sum(len(batch) for batch in records.values()) == RECORDS_PER_ROUND
    # What the kept partition leaves goes to the others, evenly.
    shares = sorted(len(records[tp]) for tp in caught_up)
    assert shares[-1] - shares[0] <= 1 and shares[0] >= (RECORDS_PER_ROUND - 2) // 6


async def test_more_partitions_than_the_bound_are_each_served_in_turn() -> None:
    buffer = Buffer()
    many = backlogs(buffer, "sa-many-events", RECORDS_PER_ROUND + RECORDS_PER_ROUND // 2, 5)
    served: set[TP] = set()
    for _ in range(2):
        records = await fetch_streams_first(buffer.round(), many, set(), 1.0, None)
        assert sum(len(batch) for batch in records.values()) == RECORDS_PER_ROUND
        served |= set(records)
    # The second round starts after the partition the first ended at, none left behind.
    assert served == many


async def test_a_replica_take_without_a_share_per_partition_is_not_bound_by_the_streams() -> None:
    buffer = Buffer()
    replica = TP("sa-fair-latest-changelog", 1)
    buffer.fetched(replica, 1_000)
    round_ = buffer.round()
    added = await take_per_partition(round_, {replica}, per_partition=None, most=250)
    assert added == 250 and round_.records[replica] == list(range(250))


async def test_two_consumers_in_one_process_each_go_round_their_own_partitions() -> None:
    # The rotation is the consumer's: another consumer's rounds over the same topics (a second
    # app in the process, a test's) neither move nor are moved by it.
    first, second = Buffer(), Buffer()
    many = backlogs(first, "sa-many-events", RECORDS_PER_ROUND + RECORDS_PER_ROUND // 2, 5)
    backlogs(second, "sa-many-events", RECORDS_PER_ROUND + RECORDS_PER_ROUND // 2, 5)
    lowest = set(sorted(many)[:RECORDS_PER_ROUND])
    taken = await fetch_streams_first(first.round(), many, set(), 1.0, None)
    assert set(taken) == lowest
    # The second consumer's first round starts where any consumer's first does; the first
    # consumer's next round goes on after where its own ended.
    assert set(await fetch_streams_first(second.round(), many, set(), 1.0, None)) == lowest
    again = await fetch_streams_first(first.round(), many, set(), 1.0, None)
    assert set(again) >= many - lowest
