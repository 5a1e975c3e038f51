"""A streamapp consumer runs our assignor even where Faust would fall back to round robin, and
names the records retention deleted before the group read them."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError
from faust.types import TP

from streamapp import App
from streamapp.faust_compat.transport import Consumer, deleted_before_read
from streamapp.faust_compat.worker_clients import worker_client_id
from streamapp.partition_assignor import StreamappPartitionAssignor
from streamapp.runtime.group.consumer import WorkerConsumer
from streamapp.runtime.producer.client import WorkerProducer


async def test_no_tables_no_standbys_still_our_assignor(tmp_path: Path) -> None:
    app = App("sa-no-tables", num_standby_replicas=0, datadir=str(tmp_path))
    assert not app.tables.changelog_topics and app.conf.table_standby_replicas == 0
    thread = app.consumer._thread  # type: ignore[attr-defined]
    consumer = thread._create_worker_consumer(app.transport)  # built, never started
    assert isinstance(app.assignor, StreamappPartitionAssignor)
    assert consumer._partition_assignment_strategy == [app.assignor]


def test_deleted_before_read_names_what_retention_took() -> None:
    # As in the windows test's failing runs: committed 168 and 151, the log starts at 233 and
    # 209 after a retention check; records 168..232 and 151..208 were never read.
    committed = {"clicks-0": 168, "clicks-1": 151, "clicks-2": 300, "clicks-3": None}
    starts = {"clicks-0": 233, "clicks-1": 209, "clicks-2": 300, "clicks-3": 50}
    assert deleted_before_read(committed, starts) == {
        "clicks-0": (168, 233),
        "clicks-1": (151, 209),
    }


def test_deleted_before_read_nothing_lost() -> None:
    # At the log start, above it, nothing committed (reset as auto_offset_reset says), or no
    # log start known: nothing to name.
    committed = {"a": 10, "b": 11, "c": None, "d": -1, "e": 5}
    starts = {"a": 10, "b": 3, "c": 7, "d": 7}
    assert deleted_before_read(committed, starts) == {}


async def test_a_rebalance_warns_of_records_deleted_before_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = App("sa-deleted", datadir=str(tmp_path))
    # clicks is a stream topic (an agent's: its records are acked), as the worker learns when
    # its agents subscribe.
    monkeypatch.setattr(app.topics, "acks_enabled_for", lambda topic: topic == "clicks")
    thread = app.consumer._thread  # type: ignore[attr-defined]

    class Consumer:
        async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
            return {tp: 233 if tp.partition == 0 else 0 for tp in tps}

    committed = {TopicPartition("clicks", 0): 168, TopicPartition("clicks", 1): 40}
    with caplog.at_level(logging.WARNING, logger="streamapp.faust_compat.transport"):
        await thread._warn_deleted_before_read(Consumer(), committed)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "streamapp: clicks[0]: records 168 to 232 were deleted (retention or DeleteRecords) "
        "before this group read them: they are not processed; the partition goes on from 233"
    ]


@pytest.mark.parametrize(
    ("guarantee", "isolation"),
    [("exactly_once", "read_committed"), ("at_least_once", "read_uncommitted")],
)
async def test_offsets_are_asked_on_a_connection_of_their_own(
    tmp_path: Path, guarantee: str, isolation: str
) -> None:
    # Transport fix 14: a consumer in no group, at the worker consumer's isolation level (the
    # LSO is the end under read_committed), so no ListOffsets waits behind a fetch.
    app = App("sa-offsets", processing_guarantee=guarantee, datadir=str(tmp_path))
    app.in_worker = True  # Faust runs transactions in a worker only
    thread = app.consumer._thread  # type: ignore[attr-defined]
    worker = thread._create_worker_consumer(app.transport)  # built, never started
    reader = thread._offsets_reader
    assert reader is not None and reader is not worker
    assert reader._group_id is None
    assert worker._isolation_level == isolation
    assert reader._isolation_level == isolation


async def test_highwaters_and_earliest_offsets_come_from_the_offsets_reader(
    tmp_path: Path,
) -> None:
    from faust.types import TP

    app = App("sa-offsets-read", processing_guarantee="exactly_once", datadir=str(tmp_path))
    thread = app.consumer._thread  # type: ignore[attr-defined]
    asked: list[str] = []

    class Reader:
        async def end_offsets(self, tps: list[TP]) -> dict[TopicPartition, int]:
            asked.append("end")
            return {TopicPartition(tp.topic, tp.partition): 42 for tp in tps}

        async def beginning_offsets(self, tps: list[TP]) -> dict[TopicPartition, int]:
            asked.append("start")
            return {TopicPartition(tp.topic, tp.partition): 7 for tp in tps}

    thread._offsets_reader = Reader()
    thread._offsets_reader_started = True
    # The worker consumer is never started: asking it would raise ConsumerNotStarted.
    tp = TP("t-changelog", 0)
    assert await thread._highwaters([tp]) == {tp: 42}
    assert await thread._earliest_offsets([tp]) == {tp: 7}
    assert asked == ["end", "start"]


class _Fetcher:
    _fetch_max_wait_ms = 1500  # Faust's


class _FetchingConsumer:
    def __init__(self) -> None:
        self._fetcher = _Fetcher()


def test_a_recovery_shortens_the_fetch_wait_and_its_end_restores_faust_s(
    tmp_path: Path,
) -> None:
    # Transport fix 16: the first changelog fetch after recovery's seek waited for the idle
    # fetch in flight, up to Faust's 1.5 s; idle workers keep the long wait.
    app = App("sa-fetch-wait", processing_guarantee="exactly_once", datadir=str(tmp_path))
    thread = app.consumer._thread  # type: ignore[attr-defined]
    thread._consumer = _FetchingConsumer()
    fetcher = thread._consumer._fetcher
    app.consumer.shorten_fetch_wait()  # type: ignore[attr-defined]
    assert fetcher._fetch_max_wait_ms == 100
    app.consumer.shorten_fetch_wait()  # type: ignore[attr-defined]  # a rebalance in one
    assert fetcher._fetch_max_wait_ms == 100
    app.consumer.restore_fetch_wait()  # type: ignore[attr-defined]
    assert fetcher._fetch_max_wait_ms == 1500
    app.consumer.restore_fetch_wait()  # type: ignore[attr-defined]  # e.g. no recovery
    assert fetcher._fetch_max_wait_ms == 1500


async def test_the_positions_of_watched_partitions_are_noted_as_each_fetch_begins(
    tmp_path: Path,
) -> None:
    # Transport fix 17: noted with the fetch loop's count of the fetch, in the consumer thread
    # before the fetch waits for records.
    from aiokafka.consumer.subscription_state import SubscriptionState
    from faust.types import TP

    app = App("sa-fetch-start", datadir=str(tmp_path))
    consumer = app.consumer
    thread = consumer._thread  # type: ignore[attr-defined]
    watched, other = TP("t-changelog", 0), TP("t-changelog", 1)
    subscription = SubscriptionState()
    subscription.assign_from_user(
        {TopicPartition(watched.topic, 0), TopicPartition(other.topic, 1)}
    )
    subscription.seek(TopicPartition(watched.topic, 0), 57)

    class Fetcher:
        _closed = False
        _subscriptions = subscription
        _records: dict[TopicPartition, object] = {}

        def _get_actions_per_node(self, assignment: object) -> tuple[object, ...]:
            return ([], {}, 0.1, False, [])

        async def fetched_records(self, *args: object, **kwargs: object) -> dict[TP, list[int]]:
            return {}

    class Fetching:
        _closed = False
        _subscription = subscription
        _fetcher = Fetcher()

    assert consumer.positions_at_fetch_start() == (-1, {})  # type: ignore[attr-defined]
    await thread._fetch_records(Fetching(), {watched}, timeout=0.0)
    assert consumer.positions_at_fetch_start() == (-1, {})  # type: ignore[attr-defined]
    consumer.watch_positions({watched, other})  # type: ignore[attr-defined]
    consumer.fetches_started = 4  # type: ignore[attr-defined]
    await thread._fetch_records(Fetching(), {watched}, timeout=0.0)
    # The other partition has no position yet: not noted.
    assert consumer.positions_at_fetch_start() == (4, {watched: 57})  # type: ignore[attr-defined]
    consumer.watch_positions(set())  # type: ignore[attr-defined]
    assert consumer.positions_at_fetch_start() == (-1, {})  # type: ignore[attr-defined]


class _BufferingConsumer(Consumer):
    """A streamapp consumer with Faust's partition sets only (never started)."""

    def __init__(self, assigned: set[TP]) -> None:
        self.app = SimpleNamespace(in_recovery=False)
        self._assigned = assigned
        self._active_partitions = set(assigned)
        self._paused_partitions = set()
        self._buffered_partitions = set()
        self._streams_await_seek = False

    def assignment(self) -> set[TP]:
        return self._assigned


STANDBY = TP("app-latest-changelog", 3)


def test_a_partition_paused_after_its_queue_filled_stays_paused_as_the_queue_drains() -> None:
    # Fix 18. Faust's on_buffer_drop made active again whatever it had set aside for a full
    # queue: a changelog partition recovery had paused read on (an active table's own writes
    # came back and were written over newer values), a gained partition held for its table's
    # recovery was processed before it.
    consumer = _BufferingConsumer({STANDBY})
    consumer.on_buffer_full(STANDBY)
    assert STANDBY not in consumer._active_partitions
    consumer.pause_partitions({STANDBY})
    consumer.on_buffer_drop(STANDBY)
    assert STANDBY not in consumer._active_partitions
    assert STANDBY not in consumer._buffered_partitions  # Faust's getmany hands those out
    consumer.resume_partitions({STANDBY})
    assert STANDBY in consumer._active_partitions


def test_a_partition_revoked_after_its_queue_filled_is_not_made_active_again() -> None:
    consumer = _BufferingConsumer({STANDBY})
    consumer.on_buffer_full(STANDBY)
    consumer._assigned = set()  # given up in an incremental rebalance
    consumer.on_buffer_drop(STANDBY)
    assert STANDBY not in consumer._active_partitions
    assert STANDBY not in consumer._buffered_partitions


def test_a_paused_partition_is_not_set_aside_by_a_full_queue() -> None:
    consumer = _BufferingConsumer({STANDBY})
    consumer.pause_partitions({STANDBY})
    consumer.on_buffer_full(STANDBY)
    assert STANDBY not in consumer._buffered_partitions


def test_a_partition_set_aside_for_its_full_queue_comes_back_as_faust_s_did() -> None:
    consumer = _BufferingConsumer({STANDBY})
    consumer.on_buffer_full(STANDBY)
    assert STANDBY in consumer._buffered_partitions
    consumer.on_buffer_drop(STANDBY)
    assert STANDBY in consumer._active_partitions
    assert STANDBY not in consumer._buffered_partitions


class _BuildingFetcher:
    """aiokafka's Fetcher as fix 19 sees it: records pending, and requests built at 1.5 s."""

    def __init__(self) -> None:
        self._records: dict[TopicPartition, object] = {}
        self._fetch_max_wait_ms = 1500

    def _get_actions_per_node(self, assignment: object) -> tuple[object, ...]:
        from aiokafka.protocol.fetch import FetchRequest

        request = FetchRequest(self._fetch_max_wait_ms, 1, 1 << 20, 0, [("events", [(0, 7, 1)])])
        return ([(0, request)], {}, 0.1, False, [])


def test_a_fetch_built_while_records_are_pending_waits_briefly() -> None:
    # Transport fix 19: the ticks' partitions, their records not taken yet, were left out of a
    # request of idle partitions that the broker then held 1.5 s, and them with it.
    from streamapp.faust_compat.transport import (
        PENDING_FETCH_MAX_WAIT_MS,
        wait_less_while_records_pending,
    )

    fetcher = _BuildingFetcher()
    wait_less_while_records_pending(fetcher)
    wait_less_while_records_pending(fetcher)  # once per fetch: wrapped once
    [(_, idle)] = fetcher._get_actions_per_node(None)[0]
    assert idle._max_wait_ms == 1500  # every partition asked: new records answer it at once
    fetcher._records[TopicPartition("ticks", 3)] = object()
    [(_, partial)] = fetcher._get_actions_per_node(None)[0]
    assert partial._max_wait_ms == PENDING_FETCH_MAX_WAIT_MS == 100
    fetcher._fetch_max_wait_ms = 50  # a shorter wait (none of Faust's) stays
    [(_, shorter)] = fetcher._get_actions_per_node(None)[0]
    assert shorter._max_wait_ms == 50


async def test_the_worker_s_kafka_clients_are_streamapp_s_named_by_its_client_id(
    tmp_path: Path,
) -> None:
    """Kafka's tools and the brokers' logs name each worker by its client id, not
    ``faust-<version>``; an app's own ``broker_client_id`` is kept."""
    app = App(
        "sa-clients",
        client_id="worker-7",
        broker="kafka://127.0.0.1:9",
        datadir=str(tmp_path / "a"),
    )
    consumer = app.consumer._thread._create_worker_consumer(app.transport)  # type: ignore[attr-defined]
    producer = app.producer
    with pytest.raises(KafkaConnectionError):  # no broker: built, then its start failed
        await producer.on_start()
    aio = producer._producer  # type: ignore[attr-defined]
    try:
        assert isinstance(consumer, WorkerConsumer)
        assert consumer._client._client_id == "worker-7"
        assert isinstance(aio, WorkerProducer)
        assert aio.client._client_id == "worker-7"
        transactional = producer._new_producer(transactional_id="t-1")  # type: ignore[attr-defined]
        assert isinstance(transactional, WorkerProducer)
        assert transactional.client._client_id == "worker-7"
        await transactional.stop()
    finally:
        await aio.stop()
        await consumer.stop()

    own = App("sa-own", broker_client_id="billing", datadir=str(tmp_path / "b"))
    assert worker_client_id(own) == "billing"
