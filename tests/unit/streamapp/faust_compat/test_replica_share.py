"""Transport fix 24: a round of the fetch loop takes the stream partitions' records first and a
bounded share of the changelogs', and the fetch loop's commit never waits (at-least-once)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Set
from pathlib import Path

import pytest
from aiokafka.consumer.fetcher import FetchError
from faust.types import TP

from streamapp import App
from streamapp.faust_compat.partition_share import RECORDS_PER_PARTITION_PER_ROUND
from streamapp.faust_compat.replica_share import REPLICA_RECORDS_PER_ROUND, fetch_streams_first
from streamapp.faust_compat.transport import IN_FETCH_LOOP
from tests.unit.streamapp.faust_compat.fetch_buffer import Buffer

STREAM = TP("sa-share-ticks", 0)
OTHER_STREAM = TP("sa-share-ticks", 1)
CHANGELOG = TP("sa-share-latest-changelog", 0)


async def test_a_round_takes_every_stream_record_and_a_share_of_the_changelogs() -> None:
    buffer = Buffer()
    buffer.fetched(CHANGELOG, 1_000)  # a replica catching up: one fetch of a thousand
    buffer.fetched(STREAM, 3)
    partitions = {STREAM, OTHER_STREAM, CHANGELOG}
    first = await fetch_streams_first(buffer.round(), partitions, {CHANGELOG}, 1.0, None)
    assert first[STREAM] == [0, 1, 2]
    assert first[CHANGELOG] == list(range(REPLICA_RECORDS_PER_ROUND))
    # Records of a kept partition fetched meanwhile go out in the very next round, ahead of
    # the replica's remaining 900.
    buffer.fetched(OTHER_STREAM, 2)
    second = await fetch_streams_first(buffer.round(), partitions, {CHANGELOG}, 1.0, None)
    assert second[OTHER_STREAM] == [0, 1]
    assert second[CHANGELOG][0] == REPLICA_RECORDS_PER_ROUND
    # Nothing is lost or repeated: the rounds hand out the replica's records in order.
    taken = first[CHANGELOG] + second[CHANGELOG]
    while CHANGELOG in buffer.held:
        taken += (await fetch_streams_first(buffer.round(), partitions, {CHANGELOG}, 1.0, None))[
            CHANGELOG
        ]
    assert taken == list(range(1_000))


async def test_faust_s_max_records_bounds_a_round_in_all() -> None:
    buffer = Buffer()
    buffer.fetched(STREAM, 30)
    buffer.fetched(CHANGELOG, 500)
    partitions = {STREAM, CHANGELOG}
    first = await fetch_streams_first(buffer.round(), partitions, {CHANGELOG}, 1.0, 50)
    assert (len(first[STREAM]), len(first[CHANGELOG])) == (30, 20)
    second = await fetch_streams_first(buffer.round(), partitions, {CHANGELOG}, 1.0, 50)
    assert list(second) == [CHANGELOG] and second[CHANGELOG][0] == 20


async def test_with_nothing_fetched_a_round_waits_for_the_next_records() -> None:
    buffer = Buffer()
    partitions = {STREAM, CHANGELOG}
    assert await fetch_streams_first(buffer.round(), partitions, {CHANGELOG}, 0, None) == {}
    waiting = asyncio.ensure_future(
        fetch_streams_first(buffer.round(), partitions, {CHANGELOG}, 1.0, None)
    )
    await asyncio.sleep(0)
    assert not waiting.done()
    buffer.fetched(CHANGELOG, 300)
    buffer.fetched(STREAM, 4)
    records = await waiting
    assert len(records[CHANGELOG]) == REPLICA_RECORDS_PER_ROUND
    assert records[STREAM] == [0, 1, 2, 3]


class Held(Mapping[TP, object]):
    """The buffer as aiokafka's fetcher holds it (``Fetcher._records``): an error as a
    ``FetchError``, which is no exception."""

    def __init__(self, buffer: Buffer) -> None:
        self.buffer = buffer

    def __getitem__(self, tp: TP) -> object:
        held = self.buffer.held[tp]
        return FetchError(error=held, backoff=0) if isinstance(held, Exception) else held

    def __iter__(self) -> Iterator[TP]:
        return iter(self.buffer.held)

    def __len__(self) -> int:
        return len(self.buffer.held)


def fetching(buffer: Buffer) -> object:
    """An aiokafka consumer, as the consumer thread's fetch reads it, over ``buffer``."""
    from aiokafka.consumer.subscription_state import SubscriptionState

    subscription = SubscriptionState()

    class Fetcher:
        _closed = False
        _subscriptions = subscription
        _records = Held(buffer)  # aiokafka's fetched records not taken yet

        def _get_actions_per_node(self, assignment: object) -> tuple[object, ...]:
            return ([], {}, 0.1, False, [])

        async def fetched_records(
            self, partitions: Set[TP], timeout: float = 0, max_records: int | None = None
        ) -> dict[TP, list[int]]:
            return await buffer.fetch(partitions, timeout, max_records)

    class Fetching:
        _closed = False
        _subscription = subscription
        _fetcher = Fetcher()

    return Fetching()


async def test_the_worker_s_fetch_takes_a_bounded_share_of_changelog_records(
    tmp_path: Path,
) -> None:
    # The consumer thread's fetch (what Faust's fetch loop calls each round) goes through the
    # share: a table's changelog partition is a replica's, the ticks a stream's.
    app = App("sa-share", datadir=str(tmp_path))
    app.Table("latest", default=int, partitions=2)
    thread = app.consumer._thread  # type: ignore[attr-defined]
    buffer = Buffer()
    buffer.fetched(CHANGELOG, 1_000)
    buffer.fetched(STREAM, 5)
    records = await thread._fetch_records(fetching(buffer), {STREAM, CHANGELOG}, timeout=1.0)
    assert records[STREAM] == [0, 1, 2, 3, 4]
    assert len(records[CHANGELOG]) == REPLICA_RECORDS_PER_ROUND


async def test_the_worker_s_fetch_leaves_an_error_fetched_mid_round_for_the_next(
    tmp_path: Path,
) -> None:
    # The consumer thread reads aiokafka's fetch errors where aiokafka keeps them: one that
    # comes in while a round takes records is not fetched (it would be raised, and the
    # round's records lost), and the next round raises it before it takes any.
    app = App("sa-share-error", datadir=str(tmp_path))
    thread = app.consumer._thread  # type: ignore[attr-defined]
    buffer = Buffer()
    buffer.fetched(STREAM, 1_000)
    buffer.fetched(OTHER_STREAM, 1_000)
    consumer = fetching(buffer)
    real_fetch = buffer.fetch

    async def fetch(tps: Set[TP], timeout: float, max_records: int | None) -> dict:
        taken = await real_fetch(tps, timeout, max_records)
        if OTHER_STREAM not in tps and buffer.has_error(OTHER_STREAM) is False:
            buffer.held.pop(OTHER_STREAM, None)
            buffer.failed(OTHER_STREAM, RuntimeError("not leader"))
        return taken

    buffer.fetch = fetch  # type: ignore[method-assign]
    records = await thread._fetch_records(consumer, {STREAM, OTHER_STREAM}, timeout=1.0)
    assert records == {STREAM: list(range(RECORDS_PER_PARTITION_PER_ROUND))}
    with pytest.raises(RuntimeError, match="not leader"):
        await thread._fetch_records(consumer, {STREAM, OTHER_STREAM}, timeout=1.0)


async def test_the_fetch_loop_s_commit_does_not_wait_for_the_commit_in_flight(
    tmp_path: Path,
) -> None:
    app = App("sa-share-commit", datadir=str(tmp_path))
    consumer = app.consumer
    in_flight: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    consumer._commit_fut = in_flight  # type: ignore[attr-defined]  # e.g. held by a join

    async def fetch_loop_commit() -> bool:
        IN_FETCH_LOOP.set(True)
        return await consumer.commit()

    async def other_commit() -> bool:
        return await consumer.commit()

    from_fetch_loop = asyncio.ensure_future(fetch_loop_commit())
    elsewhere = asyncio.ensure_future(other_commit())
    for _ in range(3):
        await asyncio.sleep(0)
    assert from_fetch_loop.done() and from_fetch_loop.result() is False
    # Any other commit waits for the one in flight, as Faust's does.
    assert not elsewhere.done()
    in_flight.set_result(None)
    assert await elsewhere is False
