"""A worker's Kafka clients: streamapp's group consumer running streamapp's assignor whatever
the app defines, an offsets reader of its own, each named by the worker's client id
(`streamapp.runtime.clients`, `streamapp.runtime.positions`)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError
from faust.types import TP

from streamapp import App
from streamapp.partition_assignor import StreamappPartitionAssignor
from streamapp.runtime import clients, positions
from streamapp.runtime.consumer import Consumer
from streamapp.runtime.group.consumer import WorkerConsumer
from streamapp.runtime.offsets_reader import OffsetsReader
from streamapp.runtime.producer.client import WorkerProducer
from streamapp.runtime.worker_clients import worker_client_id


async def test_no_tables_no_standbys_still_our_assignor(tmp_path: Path) -> None:
    app = App("sa-no-tables", num_standby_replicas=0, datadir=str(tmp_path))
    assert not app.tables.changelog_topics and app.conf.table_standby_replicas == 0
    consumer = clients.worker_consumer(app, app.transport)  # built, never started
    assert isinstance(app.assignor, StreamappPartitionAssignor)
    assert consumer._partition_assignment_strategy == [app.assignor]


async def test_the_app_s_consumer_is_streamapp_s_own(tmp_path: Path) -> None:
    app = App("sa-own-consumer", datadir=str(tmp_path))
    assert isinstance(app.consumer, Consumer)
    assert app.conf.broker_consumer[0].scheme == "streamapp"


@pytest.mark.parametrize(
    ("guarantee", "isolation"),
    [("exactly_once", "read_committed"), ("at_least_once", "read_uncommitted")],
)
async def test_offsets_are_asked_on_a_connection_of_their_own(
    tmp_path: Path, guarantee: str, isolation: str
) -> None:
    """A consumer in no group, at the worker consumer's isolation level (the LSO is the end
    under read_committed), so no ListOffsets waits behind a fetch."""
    app = App("sa-offsets", processing_guarantee=guarantee, datadir=str(tmp_path))
    app.in_worker = True  # Faust runs transactions in a worker only
    worker = clients.worker_consumer(app, app.transport)
    reader = clients.offsets_reader(app, app.transport)
    assert reader is not worker
    assert reader._group_id is None
    assert worker._isolation_level == isolation
    assert reader._isolation_level == isolation


async def test_highwaters_and_earliest_offsets_come_from_the_offsets_reader(
    tmp_path: Path,
) -> None:
    app = App("sa-offsets-read", processing_guarantee="exactly_once", datadir=str(tmp_path))
    asked: list[str] = []

    class Reader:
        async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
            asked.append("end")
            return {tp: 42 for tp in tps}

        async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
            asked.append("start")
            return {tp: 7 for tp in tps}

    consumer = app.consumer
    assert isinstance(consumer, Consumer)
    reader = consumer.fetch_loop.offsets
    assert isinstance(reader, OffsetsReader)
    reader.client = Reader()  # type: ignore[assignment]
    # The worker consumer is never started: asking it would raise.
    tp = TP("t-changelog", 0)
    assert await consumer.highwaters(tp) == {tp: 42}
    assert await consumer.earliest_offsets(tp) == {tp: 7}
    assert asked == ["end", "start"]


async def test_a_seek_to_committed_offsets_names_records_deleted_before_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    committed = {TopicPartition("clicks", 0): 168, TopicPartition("clicks", 1): 40}
    sought: list[tuple[TopicPartition, int]] = []

    class Client:
        async def seek_to_committed(self, *tps: TopicPartition) -> dict[TopicPartition, int]:
            return {tp: committed[tp] for tp in tps}

        def seek(self, tp: TopicPartition, offset: int) -> None:
            sought.append((tp, offset))

        async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
            return {tp: 233 if tp.partition == 0 else 0 for tp in tps}

    with caplog.at_level(logging.WARNING, logger="streamapp.runtime.positions"):
        await positions.seek_to_committed(Client(), list(committed), "earliest")  # type: ignore[arg-type]
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "streamapp: clicks[0]: records 168 to 232 were deleted (retention or DeleteRecords) "
        "before this group read them: they are not processed; the partition goes on from 233"
    ]


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
    consumer = clients.worker_consumer(app, app.transport)
    reader = clients.offsets_reader(app, app.transport)
    producer = app.producer
    with pytest.raises(KafkaConnectionError):  # no broker: built, then its start failed
        await producer.on_start()
    aio = producer.client  # type: ignore[attr-defined]
    try:
        assert isinstance(consumer, WorkerConsumer)
        assert consumer._client._client_id == "worker-7"
        assert reader._client._client_id == "worker-7"
        assert isinstance(aio, WorkerProducer)
        assert aio.client._client_id == "worker-7"
        transactional = producer.new_client(transactional_id="t-1")  # type: ignore[attr-defined]
        assert isinstance(transactional, WorkerProducer)
        assert transactional.client._client_id == "worker-7"
        await transactional.stop()
    finally:
        await aio.stop()
        await consumer.stop()
        await reader.stop()

    own = App("sa-own", broker_client_id="billing", datadir=str(tmp_path / "b"))
    assert worker_client_id(own) == "billing"
