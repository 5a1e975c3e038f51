"""The changelog records of a batch's table writes, sent together on the Kafka client's producer.

Faust sends a table write's changelog record through its per-record path: a ``FutureMessage``
made by ``Topic.send_soon``, put in the producer's buffer, taken off it by another task, sent
by ``publish_message`` (sensors, a ``send`` per record, a done callback per record), and at
delivery the table's callback writes the store's persisted offset, a rocksdict put per
record. While `streamapp.batches` hands an agent a batch, a table write (`encode_once.Table`)
appends its encoded key and value to the batch's `BatchChangelog` instead, and the batch's
end, before its ack, hands them to aiokafka's accumulator, in the batches its ``send`` would
put them in: no Faust object per record, and one done callback per changelog partition of
the batch, on its last record, which writes the persisted offset once (after the data: the
batch's writes were stored as it ended, before its records were sent; `batch_table`). Only
that last record gets aiokafka's future: the others go straight into the partition's open
batch, without a coroutine, a future and a ``RecordMetadata`` each, and whatever is unusual
(no open batch, a full one, a transaction not begun, ...) takes aiokafka's ``send``
(`streamapp.runtime.producer.batch_append`).

A key written more than once in a batch sends one record, its last write: a table's changelog
is read for each key's last value (it is compacted, and a recovery or a standby applies it in
order), and each of these writes is the key's whole value (Faust's set tables, whose records
are operations, take Faust's path). Kafka Streams' record cache and Quix Streams' transactions
do the same. A running count of a few keys (the ad-click demo's counters and campaign totals)
then sends a few records per batch instead of one per input record, and its standbys apply as
few.

The output records a join or an aggregate of `streamapp.joins` / `streamapp.aggregates` sends
for a record of the batch (`streamapp.joins._io.send_output`) wait here too, in the order sent,
and go to the producer with the changelog records as the batch ends, or before, when the join
is about to forget expired state under at-least-once (`send_outputs`, then the producer's
flush). Each goes to the partition the producer's partitioner picks, as ``send`` would, and
only each output partition's last record of the batch gets a future; when it resolves, a failed
delivery of any of the partition's records is logged (a WARNING naming the topic). Sent at
once, each cost a Faust ``send``, an aiokafka ``send`` and a future: 11.7 against 6.3 µs of
CPU per record, send to delivery (`bench/batch_outputs.py`). An unfinished batch sends none of
them: it is processed again.

What stays as it was:

- Under exactly_once the records go to the transactional producer Faust commits the batch's
  partition with (`streamapp.sending.sends.source_transactional_id`), under the lock of
  that transaction (its commit and the next begin take it), so they are in the transaction
  that commits the batch's offsets; the persisted offset is kept for that commit
  (``persist_offset_on_commit``), as Faust's callback does.
- The batch is acked after its records were handed to the producer: a commit covering the
  batch comes after them, and it flushes the producer first (Faust's at-least-once commit
  awaits ``producer.flush()``; an exactly_once commit ends the transaction, which aiokafka
  sends only after every record of it is acknowledged). A crash before that commit leaves the
  batch uncommitted: it is processed again, as with Faust's buffer.
- The changelog partition is the one Faust's table picks (``partition_for_key``: the batch's
  partition); a table that partitions by key (``use_partitioner``) keeps Faust's path, and so
  does every table of an app whose producer is threaded (``producer_threaded``).
- Records of one changelog partition reach the producer in the order their keys were first
  written in the batch, and its batches are delivered in that order: the last record's future
  resolves when the batch holding it is delivered, after those holding the partition's
  earlier records. It says nothing of theirs (a failed batch fails its own records only), so
  the batches they went in are checked then too (`batch_append.delivered`): a failed
  one is logged, as Faust logs each failed changelog send (the records appended without a
  future of their own would otherwise fail without a word). As with Faust, the changelog
  then lacks those records and nothing sends them again.

Not kept: Faust's producer sensors (``on_send_initiated`` / ``on_send_completed``) and the
app's ``on_produce_message`` signal are not called for these records. A batch its agent does
not finish sends none of its changelog records and stores none of its writes (it is not acked
either: it is processed again after the restart, on a store that does not hold it yet).

The aiokafka producers are the app producer's (`streamapp.runtime.producer.app_producer`):
the worker's (``client``), and each transaction's with its lock (``transaction_client``,
``transaction_lock``). Delete when Faust sends a table's changelog records in batches.
Tests: tests/unit/streamapp/sending/test_batch_changelog.py (on aiokafka's own
accumulator); tests/integration/test_batch_agent.py.
"""

from __future__ import annotations

import asyncio
import logging
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import aiokafka
from aiokafka.errors import KafkaError
from faust.exceptions import ProducerSendError
from faust.types import TP, AppT

from streamapp.runtime.producer import batch_append
from streamapp.runtime.producer.app_producer import AppProducer
from streamapp.sending.sends import source_transactional_id
from streamapp.table_writes.batch_table import BatchTable

logger = logging.getLogger(__name__)

#: The changelog of the batch being processed in this task, if it sends its own.
_current: ContextVar[BatchChangelog | None] = ContextVar("streamapp_batch_changelog", default=None)


@dataclass(frozen=True)
class Output:
    """The owner of a batch's output records to one topic (`batch_append.Record`)."""

    topic: str


class BatchChangelog:
    """The changelog records of one batch's table writes (each key's last), and the output
    records its joins and aggregates sent (see the module)."""

    def __init__(
        self,
        app: AppT,
        producer: AppProducer,
        transactional_id: str | None,
        source: TP | None = None,
    ) -> None:
        self.app = app
        self.app_producer = producer
        self.transactional_id = transactional_id  # the batch's transaction, under exactly_once
        self.source = source  # the partition the batch's records come from
        #: Output records sent for the batch's records, in the order they were sent.
        self.outputs: list[tuple[Any, str, int | None, bytes | None, bytes | None]] = []
        #: topic -> its `Output` (one per topic, so that its records group by topic).
        self._owners: dict[str, Output] = {}
        #: (changelog topic, partition, key) -> (table, topic, partition, key, value or None for
        #: a deletion): each key's last write in the batch, in the order keys were first written.
        self.records: dict[tuple[str, int, bytes], tuple[Any, str, int, bytes, bytes | None]] = {}
        #: id(table) -> that table's reads and writes in this batch (`batch_table`; None: the
        #: table takes Faust's store calls in this batch). Ended with the batch.
        self.tables: dict[int, BatchTable | None] = {}

    def end_tables(self, *, finished: bool) -> None:
        """The batch's tables are done with: a finished batch's writes go to the stores (an
        unfinished one's are dropped), and their keys to the stores' key indexes."""
        for table in self.tables.values():
            if table is not None:
                if finished:
                    table.finish()
                else:
                    table.discard()
                table.index_keys()

    def add(self, table: Any, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        # A key written again in the batch replaces its record: a changelog is read for each
        # key's last value (it is compacted, and recovery applies it in order up to the
        # persisted offset), and every write here is a key's whole value, so the batch's last
        # one is all the changelog needs, as with Kafka Streams' record cache and Quix Streams'
        # transactions (docs/batches.md).
        self.records[(topic, partition, key)] = (table, topic, partition, key, value)

    def add_output(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        """An output record sent for one of the batch's records: it goes out with the batch's
        changelog records (or before, `send_outputs`), in the partition the producer's
        partitioner picks (no partition given: `batch_append`)."""
        owner = self._owners.get(topic)
        if owner is None:
            owner = self._owners[topic] = Output(topic)
        self.outputs.append((owner, topic, None, key, value))

    async def send_outputs(self) -> None:
        """Hand the output records sent so far to the producer (before state they stand for is
        forgotten: `streamapp.joins`)."""
        outputs, self.outputs = self.outputs, []
        await self._send(outputs)

    async def send(self) -> None:
        """Hand every record to the producer; the persisted offsets follow their delivery."""
        records = [*self.records.values(), *self.outputs]
        self.records, self.outputs = {}, []
        await self._send(records)

    async def _send(
        self, records: list[tuple[Any, str, int | None, bytes | None, bytes | None]]
    ) -> None:
        if not records:
            return
        app_producer = self.app_producer
        tid = self.transactional_id
        if tid is None:
            await self.app.maybe_start_producer()
            producer = app_producer.client
            if producer is None:
                raise ProducerSendError("the producer stopped before a batch's changelog was sent")
            last = await _send(producer, records)
        else:
            # As the app producer's send in a transaction: its producer, under its lock (a
            # commit and the next begin hold it), or the same error when there is none.
            producer = app_producer.transaction_client(tid)
            if producer is None:
                raise ProducerSendError(f"No transaction producer found for : {tid}")
            async with app_producer.transaction_lock(tid):
                last = await _send(producer, records)
        for (owner, _), (fut, earlier) in last.items():
            if isinstance(owner, Output):
                fut.add_done_callback(_OutputDelivered(owner.topic, earlier))
            else:
                fut.add_done_callback(_PersistOffset(owner, earlier))


async def _send(
    producer: aiokafka.AIOKafkaProducer,
    records: list[tuple[Any, str, int | None, bytes | None, bytes | None]],
) -> dict[tuple[Any, int], batch_append.Delivery]:
    """Each record to the producer's batches; the future of each table's and changelog
    partition's last record (the partition's records are delivered in order), with those its
    other records' delivery is known by."""
    try:
        return await batch_append.send(producer, records)
    except KafkaError as exc:
        raise ProducerSendError(f"Error while sending: {exc!r}") from exc


class _PersistOffset:
    """At a changelog partition's last delivered record of a batch: what Faust's
    ``Table._on_changelog_sent`` does for each record."""

    def __init__(self, table: Any, earlier: list[asyncio.Future[Any]]) -> None:
        self.table = table
        self.earlier = earlier  # the futures the partition's other records' delivery is known by

    def __call__(self, fut: asyncio.Future[Any]) -> None:
        # Faust's publish logs each failed changelog send and goes on; so does this, for the
        # batch's earlier records (their batches: most have no future of their own) and its last.
        if self.earlier:
            self._warn(batch_append.delivered(self.earlier))
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            # The offset is not written: the store keeps claiming the earlier one.
            self._warn(exc)
            return
        # The last record's offset, as Faust's callback of the last delivered record writes it
        # (``Table._on_changelog_sent``): the store holds every write of the batch, sent or
        # lost. Under exactly_once it is written when the partition's transaction commits.
        sent = fut.result()
        table = self.table
        app = table.app
        if app.in_transaction:
            app.tables.persist_offset_on_commit(table.data, sent.topic_partition, sent.offset)
        else:
            table.data.set_persisted_offset(sent.topic_partition, sent.offset)

    def _warn(self, exc: BaseException | None) -> None:
        if exc is not None:
            logger.warning(
                "streamapp: changelog records of table %r were not delivered: %r",
                self.table.name,
                exc,
            )


class _OutputDelivered:
    """At an output topic's partition's last delivered record of a batch: a failed delivery of
    any of its records logged (most have no future of their own)."""

    def __init__(self, topic: str, earlier: list[asyncio.Future[Any]]) -> None:
        self.topic = topic
        self.earlier = earlier

    def __call__(self, fut: asyncio.Future[Any]) -> None:
        error = batch_append.delivered(self.earlier) if self.earlier else None
        # Read either way: asyncio logs an error nobody read ("never retrieved").
        last = None if fut.cancelled() else fut.exception()
        error = error or last
        if error is not None:
            logger.warning(
                "streamapp: output records to topic %r were not delivered: %r", self.topic, error
            )


def begin(app: AppT, source: TP) -> BatchChangelog | None:
    """Collect the changelog records of a batch of ``source`` from here on (None: this app's
    producer is not streamapp's or is threaded, or no transaction commits ``source``; table
    writes then take Faust's path)."""
    app_producer = app.producer
    changelog: BatchChangelog | None = None
    # A threaded producer (``producer_threaded``) sends from its own loop: Faust's path.
    if isinstance(app_producer, AppProducer) and not app.conf.producer_threaded:
        if not app.in_transaction:
            changelog = BatchChangelog(app, app_producer, None, source)
        else:
            tid = source_transactional_id(app, source)
            if tid is not None:
                changelog = BatchChangelog(app, app_producer, tid, source)
    _current.set(changelog)
    return changelog


async def end(changelog: BatchChangelog | None) -> None:
    """The batch's writes are done: send its changelog records."""
    _current.set(None)
    if changelog is not None:
        # The stores first, as each write did before the batch's writes were stored together.
        changelog.end_tables(finished=True)
        await changelog.send()


def forget() -> None:
    """A batch left unfinished: its writes go neither to its changelog nor to the stores (their
    key indexes still note the keys: an index is a hint of where to look)."""
    changelog = _current.get()
    _current.set(None)
    if changelog is not None:
        changelog.end_tables(finished=False)


def use(changelog: BatchChangelog | None) -> None:
    """Collect the table writes of the record about to be processed in ``changelog`` (None:
    Faust's path): a record-at-a-time stream's run keeps one changelog per source partition
    (`streamapp.runtime.stream_runs`) and switches between them record by record."""
    _current.set(changelog)


def current() -> BatchChangelog | None:
    """The changelog of the batch being processed in this task, if it sends its own."""
    return _current.get()
