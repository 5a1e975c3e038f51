"""A batch's table writes go to the Kafka client's producer together as the batch ends.

A real rocksdict store in a temporary directory, the app's own producer object, and real aiokafka
producers that are never started: their metadata is an answer the test gives, and their
accumulator's batches are taken as aiokafka's sender takes them (``drain_by_nodes``) and
delivered or failed by the test (``MessageBatch.done`` / ``failure``), so what is compared is
what aiokafka's accumulator holds and resolves (no broker: tests/integration/test_batch_agent.py
runs the batch agent against one). Faust's buffered path (``send_soon``) is recorded, to show it
is not taken.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import IllegalOperation, KafkaConnectionError, ProducerClosed
from aiokafka.protocol.metadata import MetadataResponse_v1
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.structs import TopicPartition
from faust.exceptions import ProducerSendError
from faust.streams import _current_event
from faust.types import TP

from streamapp import App
from streamapp.joins import JoinWindow, WindowedJoin, _io
from streamapp.runtime.producer import batch_append
from streamapp.runtime.producer.app_producer import AppProducer
from streamapp.sending import batch_changelog

SOURCE = TP("source", 2)
CHANGELOG = "batch-test-counts-changelog"
OTHER = "batch-test-totals-changelog"
TOPICS = {CHANGELOG: 4, OTHER: 4, "outputs": 4}


def _metadata(topics: dict[str, int]) -> Any:
    """A metadata answer (v1) of one broker leading every partition of ``topics``."""
    described = [
        (0, topic, False, [(0, p, 0, [0], [0]) for p in range(count)])
        for topic, count in topics.items()
    ]
    return MetadataResponse_v1([(0, "127.0.0.1", 9092, None)], 0, described)


class _Sender:
    """aiokafka's sender without a broker: whenever the accumulator wakes it, it takes the
    batches ready (``drain_by_nodes``, as the sender does) and keeps them, in order, for the
    test to deliver or fail."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.accumulator = producer._message_accumulator
        self.batches: list[Any] = []
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await self.accumulator.waiter()
            self.take()

    def take(self) -> list[Any]:
        """The batches ready now (every open one: no linger), after those taken before."""
        nodes, _ = self.accumulator.drain_by_nodes(ignore_nodes=set())
        for node_batches in nodes.values():
            self.batches.extend(node_batches.values())
        return self.batches

    def records(self) -> list[tuple[str, int, list[tuple[int, bytes | None, bytes | None]]]]:
        """Each batch taken: its topic, partition and records (offset in it, key, value)."""
        return [(batch.tp.topic, batch.tp.partition, _records_of(batch)) for batch in self.take()]


def _records_of(batch: Any) -> list[tuple[int, bytes | None, bytes | None]]:
    """A batch's records (offset in it, key, value), as its request would carry them."""
    return [(r.offset, r.key, r.value) for r in DefaultRecordBatch(bytes(batch.get_data_buffer()))]


class _Kafka:
    """Makes aiokafka producers (not started) that know ``TOPICS``, and their senders."""

    def __init__(self) -> None:
        self.made: list[AIOKafkaProducer] = []
        self.senders: list[_Sender] = []

    def producer(self, **options: Any) -> AIOKafkaProducer:
        producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9", **options)
        producer.client.cluster.update_metadata(_metadata(TOPICS))
        self.made.append(producer)
        return producer

    def sender(self, producer: AIOKafkaProducer) -> _Sender:
        sender = _Sender(producer)
        self.senders.append(sender)
        return sender


@pytest.fixture
async def kafka() -> AsyncIterator[_Kafka]:
    made = _Kafka()
    yield made
    for sender in made.senders:
        sender.task.cancel()
    for producer in made.made:
        for batches in producer._message_accumulator._batches.values():
            for batch in batches:
                batch.done_noack()  # nothing waits on them any more
        await producer.stop()


@pytest.fixture
def in_batch() -> Iterator[None]:
    """Code runs as a batch agent does: the current event is the batch's last record."""
    event = mock.Mock()
    event.message.partition = SOURCE.partition
    event.message.topic = SOURCE.topic
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)
        batch_changelog.forget()


def _app(tmp_path: Path, **options: Any) -> tuple[Any, Any, list[Any]]:
    """An app, its table, and what Faust's buffered path was given."""
    app = App("batch-test", datadir=str(tmp_path), topic_partitions=4, **options)
    app.in_worker = True  # Faust is in a transaction under exactly_once in a worker only
    app_producer = app.producer
    assert isinstance(app_producer, AppProducer)
    buffered: list[Any] = []
    app_producer.send_soon = buffered.append  # type: ignore[method-assign]
    app.maybe_start_producer = mock.AsyncMock(return_value=app_producer)
    table = app.Table("counts", default=int, partitions=4)
    table._verify_source_topic_partitions = lambda topic: None
    return app, table, buffered


def _futures(sender: _Sender) -> int:
    """The futures aiokafka keeps for single records, in the batches taken."""
    return sum(len(batch._msg_futures) for batch in sender.take())


async def test_a_batch_sends_each_keys_last_changelog_record_at_its_end(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    app, counts, buffered = _app(tmp_path)
    aio = app.producer.client = kafka.producer()
    sender = kafka.sender(aio)
    changelog = batch_changelog.begin(app, SOURCE)
    assert changelog is not None
    counts["a"] += 1
    counts["a"] += 1
    counts["b"] = 5
    del counts["b"]
    # Written to the store at once (reads in the batch see them), nothing sent yet.
    assert counts["a"] == 2 and "b" not in counts
    assert sender.records() == [] and buffered == []
    await batch_changelog.end(changelog)
    assert batch_changelog.current() is None
    assert sender.records() == [
        (
            CHANGELOG,
            2,
            [
                # Each key's last write only, in the order the keys were first written: the
                # deletion replaces the write it deletes.
                (0, b'"a"', b"2"),
                (1, b'"b"', None),
            ],
        )
    ]
    assert buffered == []  # Faust's per-record path was not taken
    store = counts.data
    changelog_tp = TP(CHANGELOG, 2)
    assert store.persisted_offset(changelog_tp) is None
    with mock.patch.object(store, "set_persisted_offset", wraps=store.set_persisted_offset) as spy:
        (batch,) = sender.batches
        batch.done(10)
        await asyncio.sleep(0)
    assert spy.call_count == 1
    assert store.persisted_offset(changelog_tp) == 11  # the last record's: 10 + 1


async def test_a_key_written_again_sends_only_its_last_write_which_rebuilds_the_table(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    """Each key's last write in the batch is its record, deletions and writes after them alike;
    applied in order, as a recovery or a standby applies the changelog, they leave the rows the
    batch left in the store."""
    app, counts, _ = _app(tmp_path)
    aio = app.producer.client = kafka.producer()
    sender = kafka.sender(aio)
    changelog = batch_changelog.begin(app, SOURCE)
    assert changelog is not None
    for _ in range(5):
        counts["a"] += 1
    counts["gone"] = 1
    del counts["gone"]
    counts["back"] = 1
    del counts["back"]
    counts["back"] = 9
    await batch_changelog.end(changelog)
    [(topic, partition, records)] = sender.records()
    assert (topic, partition) == (CHANGELOG, 2)
    sent = [(key, value) for _, key, value in records]
    assert sent == [(b'"a"', b"5"), (b'"gone"', None), (b'"back"', b"9")]
    replayed: dict[bytes, bytes] = {}
    for key, value in sent:
        if key is not None and value is None:
            replayed.pop(key, None)
        elif key is not None and value is not None:
            replayed[key] = value
    assert sorted(replayed.items()) == sorted(counts.data.items_of(2))


async def test_records_go_to_the_batches_per_record_sends_fill(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    """The same records, in the same order, in the same batches of each partition as one
    aiokafka ``send`` per record leaves: here with two tables' changelogs interleaved, open
    batches already there (output records sent before), and batches that fill up (the record
    that finds its batch full takes ``send``, which waits for the batch to be taken; the
    sender takes the other partition's open batch too, and its next record needs a new one)."""
    records = []
    for i in range(60):
        table = "counts" if i % 3 else "totals"
        topic = CHANGELOG if i % 3 else OTHER
        value = None if i % 7 == 0 else f'{{"n": {i}}}'.encode()
        records.append((table, topic, 2, f'"key-{i % 9}"'.encode(), value))

    async def fill(direct: bool) -> list[Any]:
        producer = kafka.producer(max_batch_size=300)
        sender = kafka.sender(producer)
        await producer.send(CHANGELOG, b"earlier", key=b"k", partition=2)
        await producer.send(OTHER, b"earlier", key=b"k", partition=2)
        if direct:
            await batch_append.send(producer, records)
        else:
            for _, topic, partition, key, value in records:
                await producer.send(topic, value, key=key, partition=partition)
        return sender.records()

    per_record = await fill(direct=False)
    assert len([b for b in per_record if b[0] == CHANGELOG]) > 2  # the batches filled up
    assert await fill(direct=True) == per_record


async def test_one_future_per_table_and_partition_resolved_at_its_last_records_delivery(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    """Records appended to an open batch make no future; each (table, partition)'s last record
    has aiokafka's, and its offset is written once, when the batch holding it is delivered."""
    app, counts, _ = _app(tmp_path)
    totals = app.Table("totals", default=int, partitions=4)
    totals._verify_source_topic_partitions = lambda topic: None
    aio = app.producer.client = kafka.producer(max_batch_size=300)
    sender = kafka.sender(aio)
    # An output record before: each changelog partition has an open batch with one future.
    await aio.send(CHANGELOG, b"out", key=b"k", partition=2)
    await aio.send(OTHER, b"out", key=b"k", partition=2)
    changelog = batch_changelog.begin(app, SOURCE)
    for i in range(30):
        counts[f"k{i}"] = i
        if i % 10 == 0:
            totals[f"t{i}"] = i
    with mock.patch.object(aio, "send", wraps=aio.send) as send:
        await batch_changelog.end(changelog)
    batches = sender.take()
    by_topic = {topic: [b for b in batches if b.tp.topic == topic] for topic in (CHANGELOG, OTHER)}
    # The first changelog's batch filled up; aiokafka's sender took the other's open batch
    # with it (it takes every partition's open batch each time it runs).
    assert len(by_topic[CHANGELOG]) == 2 and len(by_topic[OTHER]) == 2
    # ``send`` only for the record that found its batch full, and for the other table's next
    # record (its batch was taken: aiokafka makes the next one); that one is its table's last.
    # Which record fills the batch depends on the records' timestamps (a delta of 64 ms or more
    # takes a byte more): the first batch holds the output record and k0 up to the one before.
    first_full = by_topic[CHANGELOG][0].record_count - 1
    assert [(c.args[0], c.kwargs["key"]) for c in send.call_args_list] == [
        (CHANGELOG, f'"k{first_full}"'.encode()),
        (OTHER, b'"t20"'),
    ]
    # Futures: the two output records', those two sends', the first table's last record's.
    assert _futures(sender) == 2 + 2 + 1
    stores = {CHANGELOG: counts.data, OTHER: totals.data}
    spies = {
        topic: mock.patch.object(store, "set_persisted_offset", wraps=store.set_persisted_offset)
        for topic, store in stores.items()
    }
    bases = {CHANGELOG: 100, OTHER: 500}

    def deliver(batch: Any) -> None:
        batch.done(bases[batch.tp.topic])
        bases[batch.tp.topic] += batch.record_count

    with spies[CHANGELOG] as counts_spy, spies[OTHER] as totals_spy:
        for batch in (by_topic[CHANGELOG][0], by_topic[OTHER][0]):
            deliver(batch)
            await asyncio.sleep(0)
            # Not before the partition's last record.
            assert counts_spy.call_count == 0 and totals_spy.call_count == 0
        deliver(by_topic[OTHER][1])
        await asyncio.sleep(0)
        assert counts_spy.call_count == 0 and totals_spy.call_count == 1
        deliver(by_topic[CHANGELOG][1])
        await asyncio.sleep(0)
        assert counts_spy.call_count == 1 and totals_spy.call_count == 1
    # The output record is the first of each partition's first batch: offsets after it.
    assert counts.data.persisted_offset(TP(CHANGELOG, 2)) == 100 + 30
    assert totals.data.persisted_offset(TP(OTHER, 2)) == 500 + 3


async def test_without_an_open_batch_the_first_record_takes_send(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    app, counts, _ = _app(tmp_path)
    aio = app.producer.client = kafka.producer()
    sender = kafka.sender(aio)
    changelog = batch_changelog.begin(app, SOURCE)
    for i in range(5):
        counts[f"k{i}"] = i
    with mock.patch.object(aio, "send", wraps=aio.send) as send:
        await batch_changelog.end(changelog)
    # aiokafka makes the partition's batch for the first; the rest are appended to it.
    assert [c.args[0] for c in send.call_args_list] == [CHANGELOG]
    assert [len(records) for _, _, records in sender.records()] == [5]
    assert _futures(sender) == 2  # the first record's (from send) and the last's


async def test_records_go_to_the_open_batch_behind_one_sent_again(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    """A batch whose request failed and is retried waits at the head of its partition's queue,
    built and closed; the records go to the open batch behind it, as ``send``'s do."""
    aio = kafka.producer()
    sender = kafka.sender(aio)
    accumulator = aio._message_accumulator
    await aio.send(CHANGELOG, b"first", key=b"k", partition=2)
    (retried,) = sender.take()
    retried.get_data_buffer()  # its request was built
    await aio.send(CHANGELOG, b"second", key=b"k", partition=2)  # the open batch
    accumulator.reenqueue(retried)
    queue = accumulator._batches[TopicPartition(CHANGELOG, 2)]
    retried_, behind = queue
    assert retried_ is retried
    records = [("counts", CHANGELOG, 2, b"a", b"1"), ("counts", CHANGELOG, 2, b"b", b"2")]
    with mock.patch.object(aio, "send", wraps=aio.send) as send:
        await batch_append.send(aio, records)
    assert send.call_count == 0
    assert _records_of(behind) == [(0, b"k", b"second"), (1, b"a", b"1"), (2, b"b", b"2")]
    assert _records_of(retried) == [(0, b"k", b"first")]


async def test_a_failed_delivery_writes_no_offset(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    app, counts, _ = _app(tmp_path)
    aio = app.producer.client = kafka.producer()
    sender = kafka.sender(aio)
    changelog = batch_changelog.begin(app, SOURCE)
    counts["a"] = 1
    counts["b"] = 2
    await batch_changelog.end(changelog)
    (batch,) = sender.take()
    batch.failure(KafkaConnectionError("not delivered"))
    await asyncio.sleep(0)
    assert counts.data.persisted_offset(TP(CHANGELOG, 2)) is None


@pytest.mark.parametrize("state", ["a fatal error", "closed"])
async def test_an_accumulator_that_refuses_records_fails_the_batch_as_send_does(
    tmp_path: Path, in_batch: None, kafka: _Kafka, state: str
) -> None:
    app, counts, _ = _app(tmp_path)
    aio = app.producer.client = kafka.producer()
    await aio.send(CHANGELOG, b"out", key=b"k", partition=2)  # an open batch
    accumulator = aio._message_accumulator
    (open_batch,) = accumulator._batches[TopicPartition(CHANGELOG, 2)]
    if state == "closed":
        accumulator._closed = True  # as ``close`` sets it before flushing
        expected: type[Exception] = ProducerClosed
    else:
        accumulator.fail_all(KafkaConnectionError("the sender gave up"))
        expected = KafkaConnectionError
    with pytest.raises(expected):  # what aiokafka's send raises
        await aio.send(CHANGELOG, b"x", key=b"k", partition=2)
    changelog = batch_changelog.begin(app, SOURCE)
    counts["a"] = 1
    counts["b"] = 2
    with pytest.raises(ProducerSendError, match=expected.__name__):
        await batch_changelog.end(changelog)
    assert open_batch.record_count == 1  # nothing appended past aiokafka's refusal


async def test_a_transactional_producer_out_of_its_transaction_raises_as_send_does(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    aio = kafka.producer(transactional_id="tid-2")
    txn = aio._txn_manager
    txn.set_pid_and_epoch(1, 0)
    await aio.begin_transaction()
    await aio.send(CHANGELOG, b"out", key=b"k", partition=2)  # an open batch
    (open_batch,) = aio._message_accumulator._batches[TopicPartition(CHANGELOG, 2)]
    txn.committing_transaction()  # a commit under way: not in the transaction any more
    records = [("counts", CHANGELOG, 2, b"a", b"1"), ("counts", CHANGELOG, 2, b"b", b"2")]
    with pytest.raises(IllegalOperation):
        await batch_append.send(aio, records)
    assert open_batch.record_count == 1


async def test_a_partition_missing_from_the_metadata_takes_send(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    """``send`` waits for it (`streamapp.runtime.producer.partition_wait`); here a stand-in
    records what it is given."""
    aio = kafka.producer()
    await aio.send(CHANGELOG, b"out", key=b"k", partition=2)  # an open batch
    (open_batch,) = aio._message_accumulator._batches[TopicPartition(CHANGELOG, 2)]
    aio.client.cluster.update_metadata(_metadata({**TOPICS, CHANGELOG: 2}))
    given: list[tuple[Any, ...]] = []

    async def send(topic: str, value: Any = None, key: Any = None, partition: Any = None) -> Any:
        given.append((topic, key, value, partition))
        return asyncio.get_running_loop().create_future()

    records = [("counts", CHANGELOG, 2, b"a", b"1"), ("counts", CHANGELOG, 2, b"b", b"2")]
    with mock.patch.object(aio, "send", send):
        last = await batch_append.send(aio, records)
    assert given == [(CHANGELOG, b"a", b"1", 2), (CHANGELOG, b"b", b"2", 2)]
    assert open_batch.record_count == 1 and list(last) == [("counts", 2)]


async def test_a_record_near_max_request_size_takes_send(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    """``send`` checks a record's size against ``max_request_size``; a record that may be too
    large is left to it (here it raises, as for a record sent alone)."""
    aio = kafka.producer(max_request_size=1000, max_batch_size=4000)
    await aio.send(CHANGELOG, b"out", key=b"k", partition=2)  # an open batch with room
    (open_batch,) = aio._message_accumulator._batches[TopicPartition(CHANGELOG, 2)]
    small = ("counts", CHANGELOG, 2, b"a", b"1")
    large = ("counts", CHANGELOG, 2, b"b", b"x" * 990)
    with pytest.raises(ProducerSendError, match="MessageSizeTooLargeError"):
        await batch_changelog._send(aio, [small, large, small])
    assert open_batch.record_count == 2  # the small one before it went in


async def test_a_producer_with_a_send_of_its_own_gets_every_record(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    class Traced(AIOKafkaProducer):
        given: list[bytes] = []

        async def send(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> Any:
            self.given.append(key)
            return await super().send(topic, value, key, **kw)

    aio = Traced(bootstrap_servers="127.0.0.1:9")
    aio.client.cluster.update_metadata(_metadata(TOPICS))
    kafka.made.append(aio)
    await aio.send(CHANGELOG, b"out", key=b"k", partition=2)  # an open batch
    records = [("counts", CHANGELOG, 2, b"a", b"1"), ("counts", CHANGELOG, 2, b"b", b"2")]
    last = await batch_append.send(aio, records)
    assert Traced.given == [b"k", b"a", b"b"] and list(last) == [("counts", 2)]


async def test_exactly_once_sends_in_the_batchs_transaction_under_its_lock(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    app, counts, buffered = _app(tmp_path, processing_guarantee="exactly_once")
    plain, transactional = kafka.producer(), kafka.producer(transactional_id="tid-2")
    transactional._txn_manager.set_pid_and_epoch(1, 0)
    await transactional.begin_transaction()
    plain_sender, sender = kafka.sender(plain), kafka.sender(transactional)
    app_producer = app.producer
    app_producer.client = plain
    app_producer._transaction_clients["tid-2"] = transactional
    lock = app_producer.transaction_lock("tid-2")
    with mock.patch.object(batch_changelog, "source_transactional_id", return_value="tid-2") as tid:
        changelog = batch_changelog.begin(app, SOURCE)
    tid.assert_called_once_with(app, SOURCE)
    counts["a"] = 1
    counts["b"] = 2
    await lock.acquire()  # a commit (or the next begin) of the transaction is under way
    ending = asyncio.ensure_future(batch_changelog.end(changelog))
    for _ in range(5):
        await asyncio.sleep(0)
    assert sender.records() == [] and not ending.done()
    lock.release()
    await ending
    assert sender.records() == [(CHANGELOG, 2, [(0, b'"a"', b"1"), (1, b'"b"', b"2")])]
    # The partition was added to the transaction (aiokafka's send made the batch).
    assert TopicPartition(CHANGELOG, 2) in transactional._txn_manager.partitions_to_add()
    assert plain_sender.records() == [] and buffered == []
    with mock.patch.object(app.tables, "persist_offset_on_commit") as on_commit:
        sender.batches[0].done(7)
        await asyncio.sleep(0)
    # Under exactly_once the store's offset is written when the transaction commits, as Faust's.
    on_commit.assert_called_once_with(counts.data, TP(CHANGELOG, 2), 8)
    assert counts.data.persisted_offset(TP(CHANGELOG, 2)) is None


async def test_writes_outside_a_batch_keep_fausts_path(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    app, counts, buffered = _app(tmp_path)
    aio = app.producer.client = kafka.producer()
    sender = kafka.sender(aio)
    counts["a"] = 1
    assert sender.records() == [] and len(buffered) == 1


async def test_no_transaction_for_the_source_keeps_fausts_path(
    tmp_path: Path, in_batch: None
) -> None:
    app, _, _ = _app(tmp_path, processing_guarantee="exactly_once")
    with mock.patch.object(batch_changelog, "source_transactional_id", return_value=None):
        assert batch_changelog.begin(app, SOURCE) is None
    assert batch_changelog.current() is None


async def test_a_threaded_producer_keeps_fausts_path(tmp_path: Path, in_batch: None) -> None:
    app, counts, buffered = _app(tmp_path, producer_threaded=True)
    assert batch_changelog.begin(app, SOURCE) is None
    counts["a"] = 1
    assert len(buffered) == 1


@pytest.mark.parametrize("failed", ["appended", "sent"])
async def test_an_earlier_batch_that_failed_is_logged(
    tmp_path: Path, in_batch: None, kafka: _Kafka, caplog: pytest.LogCaptureFixture, failed: str
) -> None:
    """A partition's records spread over two aiokafka batches; the first fails, the one holding
    the last record is delivered. A warning names the table (most of the lost records had no
    future to fail), the error of a record that took ``send`` is read (asyncio logs none as
    never retrieved), and the offset is the last record's, as Faust's callbacks leave it."""
    app, counts, _ = _app(tmp_path)
    aio = app.producer.client = kafka.producer(max_batch_size=300)
    sender = kafka.sender(aio)
    if failed == "appended":
        await aio.send(CHANGELOG, b"out", key=b"k", partition=2)  # an open batch: appended to
    changelog = batch_changelog.begin(app, SOURCE)
    for i in range(30):
        counts[f"k{i}"] = i
    with mock.patch.object(aio, "send", wraps=aio.send) as send:
        await batch_changelog.end(changelog)
    # ``send`` for the record that found the first batch full, and with no open batch before,
    # for the first record too.
    assert send.call_count == (1 if failed == "appended" else 2)
    first, second = sender.take()
    ((first_future, _),) = first._msg_futures  # the output record's, or the first record's
    store = counts.data
    first.failure(KafkaConnectionError("lost"))
    second.done(200)
    await asyncio.sleep(0)
    assert "changelog records of table 'counts' were not delivered" in caplog.text
    assert "KafkaConnectionError('lost')" in caplog.text
    assert store.persisted_offset(TP(CHANGELOG, 2)) == 200 + second.record_count - 1
    if failed == "sent":  # the first record's future, from send, is the batch's: read
        assert first_future.done() and not first_future._log_traceback


async def test_when_every_batch_is_delivered_the_offset_is_the_last_records(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    app, counts, _ = _app(tmp_path)
    aio = app.producer.client = kafka.producer(max_batch_size=300)
    sender = kafka.sender(aio)
    changelog = batch_changelog.begin(app, SOURCE)
    for i in range(30):
        counts[f"k{i}"] = i
    await batch_changelog.end(changelog)
    first, second = sender.take()
    first.done(100)
    second.done(100 + first.record_count)
    await asyncio.sleep(0)
    assert counts.data.persisted_offset(TP(CHANGELOG, 2)) == 100 + 29


# -- output records sent for a batch's records (streamapp.joins' send_output) --

OUTPUTS = "outputs"


def _wired(tmp_path: Path, kafka: _Kafka) -> tuple[Any, Any, AIOKafkaProducer, _Sender]:
    """An app and its table, its Faust producer on an aiokafka producer, and that one's sender."""
    app, counts, _ = _app(tmp_path)
    aio = app.producer.client = kafka.producer()
    return app, counts, aio, kafka.sender(aio)


def _source_record() -> Any:
    """A record of the batch's partition, as a join's output is sent for."""
    message = mock.Mock()
    message.topic, message.partition = SOURCE.topic, SOURCE.partition
    return message


async def test_a_batchs_outputs_go_out_at_its_end_where_send_would_put_them(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    """Held until the batch ends, then in the partitions aiokafka's partitioner picks, in the
    order sent, with aiokafka's future for each partition's last record only."""
    app, counts, buffered = _app(tmp_path)
    aio = app.producer.client = kafka.producer()
    sender = kafka.sender(aio)
    sent = [(f"auction-{i}".encode(), f'{{"n": {i}}}'.encode()) for i in range(40)]
    changelog = batch_changelog.begin(app, SOURCE)
    assert changelog is not None
    with mock.patch.object(aio, "send", wraps=aio.send) as send:
        for key, value in sent:
            await _io.send_output(app, _source_record(), OUTPUTS, key, value)
        counts["a"] = 1
        assert sender.records() == [] and send.call_count == 0  # nothing before the end
        await batch_changelog.end(changelog)
    per_partition: dict[int, list[tuple[bytes, bytes]]] = {}
    for key, value in sent:
        per_partition.setdefault(aio._partition(OUTPUTS, None, key, value, key, value), []).append(
            (key, value)
        )
    assert len(per_partition) > 1  # the keys spread over the topic's partitions
    taken = sender.records()
    outputs = {partition: records for topic, partition, records in taken if topic == OUTPUTS}
    assert {p: [(k, v) for _, k, v in records] for p, records in outputs.items()} == per_partition
    assert (CHANGELOG, 2, [(0, b'"a"', b"1")]) in taken
    # aiokafka's send made each partition's first batch (none was open) and took the one
    # changelog record; the rest went in without a future, bar each partition's last record.
    assert send.call_count == len(per_partition) + 1
    assert _futures(sender) == 2 * len(per_partition) + 1
    assert buffered == []


async def test_a_batchs_undelivered_outputs_are_logged(
    tmp_path: Path, in_batch: None, kafka: _Kafka, caplog: pytest.LogCaptureFixture
) -> None:
    app, _, aio, sender = _wired(tmp_path, kafka)
    before = await aio.send(OUTPUTS, b"before", key=b"k", partition=1)  # an open batch
    key = next(k for k in (f"k{i}".encode() for i in range(100)) if _partition(aio, k) == 1)
    changelog = batch_changelog.begin(app, SOURCE)
    for n in range(3):
        await _io.send_output(app, _source_record(), OUTPUTS, key, str(n).encode())
    await batch_changelog.end(changelog)
    (batch,) = sender.take()
    assert batch.record_count == 4
    batch.failure(KafkaConnectionError("lost"))
    await asyncio.sleep(0)
    assert "output records to topic 'outputs' were not delivered" in caplog.text
    assert "KafkaConnectionError('lost')" in caplog.text
    assert before.exception() is not None  # the test's own record's: read here
    # The batch's last record's future, aiokafka's, was read too: asyncio logs no
    # "Future exception was never retrieved" for it.
    ((last, _),) = [entry for entry in batch._msg_futures if entry[0] is not before]
    assert last.done() and not last._log_traceback


def _partition(producer: AIOKafkaProducer, key: bytes) -> int:
    return int(producer._partition(OUTPUTS, None, key, None, key, None))


async def test_an_unfinished_batchs_outputs_are_not_sent(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    app, _, _, sender = _wired(tmp_path, kafka)
    batch_changelog.begin(app, SOURCE)
    await _io.send_output(app, _source_record(), OUTPUTS, b"k", b"v")
    batch_changelog.forget()  # the agent raised: the batch is processed again after a restart
    assert sender.records() == []


async def test_before_state_is_forgotten_the_outputs_so_far_go_out_and_are_flushed(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    app, counts, _, sender = _wired(tmp_path, kafka)
    changelog = batch_changelog.begin(app, SOURCE)
    await _io.send_output(app, _source_record(), OUTPUTS, b"k", b"before")
    counts["a"] = 1
    flushed_with: list[Any] = []

    async def flush() -> None:
        flushed_with.extend(sender.records())

    with mock.patch.object(app.producer, "flush", side_effect=flush):
        await _io.flush_before_forgetting(app)
    # The output went to the producer before its flush; the changelog waits for the batch's end.
    assert [(topic, [v for _, _, v in records]) for topic, _, records in flushed_with] == [
        (OUTPUTS, [b"before"])
    ]
    await _io.send_output(app, _source_record(), OUTPUTS, b"k", b"after")
    await batch_changelog.end(changelog)
    values = [(topic, v) for topic, _, records in sender.records() for _, _, v in records]
    assert sorted(values) == [(CHANGELOG, b"1"), (OUTPUTS, b"after"), (OUTPUTS, b"before")]
    assert values.index((OUTPUTS, b"before")) < values.index((OUTPUTS, b"after"))


@pytest.mark.parametrize("how", ["another partition", "no batch"])
async def test_outputs_the_batch_cannot_hold_are_sent_at_once(
    tmp_path: Path, in_batch: None, kafka: _Kafka, how: str
) -> None:
    app, _, _, sender = _wired(tmp_path, kafka)
    if how != "no batch":
        batch_changelog.begin(app, SOURCE)
    source = _source_record()
    if how == "another partition":
        source.partition = 3
    await _io.send_output(app, source, OUTPUTS, b"k", b"v")
    assert [(topic, len(records)) for topic, _, records in sender.records()] == [(OUTPUTS, 1)]


async def test_a_joins_send_with_headers_goes_at_once_the_others_with_the_batch(
    tmp_path: Path, in_batch: None, kafka: _Kafka
) -> None:
    app, _, _, sender = _wired(tmp_path, kafka)
    raw: dict[str, Any] = {"key_type": bytes, "value_type": bytes}
    join = WindowedJoin(
        app,
        "j",
        left=app.topic("j-left", **raw),
        right=app.topic("j-right", **raw),
        window=JoinWindow(before_ms=0, after_ms=100, grace_ms=0),
        partitions=4,
        output=lambda result: None,
        batch_records=100,
    )
    outputs = app.topic(OUTPUTS, **raw)
    changelog = batch_changelog.begin(app, SOURCE)
    await join.send(_source_record(), outputs, key=b"k", value=b"held")
    await join.send(_source_record(), outputs, key=b"k", value=b"now", headers=[("h", b"1")])
    assert [[v for _, _, v in records] for _, _, records in sender.records()] == [[b"now"]]
    await batch_changelog.end(changelog)
    assert [[v for _, _, v in records] for _, _, records in sender.records()] == [
        [b"now"],
        [b"held"],
    ]
