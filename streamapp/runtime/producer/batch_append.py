"""A batch's changelog and output records put in aiokafka's open batches, without a future each.

`streamapp.sending.batch_changelog` hands a batch's changelog records and the output
records its joins and aggregates sent to aiokafka's producer as the batch ends, and uses only
the future of each (table or output topic, partition)'s last record (for a changelog, its done
callback writes the persisted offset). An output record with no partition gets the one
``send`` would give it, from the producer's own partitioner (``_partition``).

aiokafka's ``send`` costs every record a coroutine (``send``, ``_wait_on_metadata``,
``add_message``), the partition checked in the metadata, a ``TopicPartition``, a future, and at
delivery a ``RecordMetadata`` and the future set. Here each record of a partition but its last
is appended to the builder of the partition's open ``MessageBatch`` (the batch ``add_message``
would append it to: the last of the partition's queue), which copies its bytes and nothing
more; the last record is appended by that batch's own ``append``, which gives it aiokafka's
future. The bytes in the batches, and their order, are those per-record ``send`` calls leave:
neither yields to the event loop while the record goes in (aiokafka's sender cannot take the
batch in between), and both append to the same batch, with the time of the append as the
record's timestamp.

Delivery, in aiokafka 0.14 (``message_accumulator.py``, ``sender.py``): a partition's batches
leave its queue in order (``drain_by_nodes`` pops the oldest), one at a time (the partition is
muted while its batch is in flight), and a batch sent again is put back at the head of the
queue; so the batch holding a partition's last record is delivered with or after those holding
the others. A failed batch fails its own futures only (``MessageBatch.failure``; all of them
only through ``fail_all``, the sender's fatal error); a later batch of the partition is sent
and may succeed. So the last record's future alone says whether the last record was
delivered, not the others. So `send` also gives, for each (table, partition), the futures its
other records' delivery is known by: those of the batches they were appended to, and those
``send`` gave the ones that took it, all done once the last record's is. When it is done,
`delivered` reads them and gives the first error, which `batch_changelog` logs as Faust logs
a failed changelog send (the records appended without a future would otherwise fail without
a word), and no future of a record that took ``send`` is left with an unread error (asyncio's
"Future exception was never retrieved").

Whatever is unusual takes aiokafka's own ``send`` for that record (the errors, the wait for a
full batch to drain, ``maybe_add_partition_to_txn`` for a new batch, the checks, stay its):
no open batch for the partition, a full or closed batch (its ``append`` refused the record),
the accumulator closed or holding the sender's fatal error, a transactional producer not in a
transaction, the topic or partition not in the producer's metadata (a `WorkerProducer`'s
``send`` then waits for it, `streamapp.runtime.producer.partition_wait`), a producer with key or
value serializers, and a record that may be larger than ``max_request_size`` (``send`` raises
for it). After a ``send`` that waited, the conditions are checked again (the event loop ran
meanwhile). A producer whose class has a ``send`` of its own other than aiokafka's or
`WorkerProducer`'s (a subclass overriding them) gets every record through it.

aiokafka internals this relies on (`streamapp.runtime.producer.PRIVATE_NAMES`):
``AIOKafkaProducer._message_accumulator``, ``_txn_manager``, ``_key_serializer``,
``_value_serializer`` and ``_max_request_size`` (what ``send`` reads), ``_partition`` (the
partition ``send`` picks for a record that names none), ``MessageAccumulator._batches``,
``_closed`` and ``_exception`` (the open batches and what ``add_message`` checks),
``MessageBatch._builder`` (the builder its ``append`` appends to).
aiokafka has no public call that appends to a partition's open batch without a future (its
``send_batch`` queues a batch of its own, after the partition's previous one is drained: a wait
per agent batch). Delete this module when aiokafka has one, or when a future per record no
longer costs what it does here (docs/performance.md).
Tests: tests/unit/streamapp/sending/test_batch_changelog.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

import aiokafka
from aiokafka.structs import TopicPartition

from streamapp.runtime.producer.client import WorkerProducer

#: (owner, topic, partition, key, value): a table's changelog record (the table, its changelog
#: topic and partition, the key, the value or None for a deletion), or an output record (its
#: owner `batch_changelog.Output`; a partition of None is the producer's partitioner's to pick,
#: as ``send`` would; the key may be None too).
Record = tuple[Any, str, int | None, bytes | None, bytes | None]

#: A `Record` with its partition.
_Placed = tuple[Any, str, int, bytes | None, bytes | None]

#: A (table, partition)'s last record's future, and the futures of the batches its other
#: records were appended to and of those that took ``send`` (`delivered` reads them).
Delivery = tuple[asyncio.Future[Any], list[asyncio.Future[Any]]]

#: More than a record's size estimate (``estimate_size_in_bytes``, which ``send`` compares
#: with ``max_request_size``) adds to its key and value: the batch header (61), a record's
#: overhead (21), the lengths' varints (at most 5 each) and the headers' count (1), 93 in all.
#: A record closer than this to the limit takes ``send``, which checks it.
_HEADROOM = 128

#: What ``send`` appends without headers (read only: the builder iterates it).
_NO_HEADERS: list[tuple[str, bytes]] = []

#: The ``send`` methods whose records may skip them: aiokafka's, and `WorkerProducer`'s (which
#: only waits for a partition missing from the metadata first, where `_open_batch` finds none).
_APPENDING_SENDS = (aiokafka.AIOKafkaProducer.send, WorkerProducer.send)


async def send(
    producer: aiokafka.AIOKafkaProducer, records: Sequence[Record]
) -> dict[tuple[Any, int], Delivery]:
    """Each record to the producer's batches; for each (owner, partition), the future of its
    last record, resolved when its batch is delivered, and the futures its other records'
    delivery is known by, to check with `delivered` then (see the module)."""
    placed = await _partitioned(producer, records)
    # The index of each (table, partition)'s last record: it is the one given a future.
    ends = set({(record[0], record[2]): i for i, record in enumerate(placed)}.values())
    last: dict[tuple[Any, int], asyncio.Future[Any]] = {}
    #: (table, partition) -> what its other records' delivery is known by: the futures of the
    #: batches they were appended to, and those ``send`` gave them.
    others: dict[tuple[Any, int], list[asyncio.Future[Any]]] = {}
    if type(producer).send not in _APPENDING_SENDS:
        # A send of its own (a subclass's override, a stand-in): it is called for every record.
        for i, (table, topic, partition, key, value) in enumerate(placed):
            fut = await producer.send(topic, value, key=key, partition=partition)
            if i in ends:
                last[table, partition] = fut
            else:
                others.setdefault((table, partition), []).append(fut)
        return _with_the_others(last, others)
    direct = _direct(producer)
    max_size = producer._max_request_size - _HEADROOM
    #: (topic, partition) -> the batch its records go to, or None: ``send``. Valid until the
    #: event loop runs (only a ``send`` below lets it): aiokafka's sender drains batches.
    batches: dict[tuple[str, int], Any] = {}
    for i, (table, topic, partition, key, value) in enumerate(placed):
        if direct:
            try:
                batch = batches[topic, partition]
            except KeyError:
                batch = batches[topic, partition] = _open_batch(producer, topic, partition)
                if batch is not None:  # its records may go in: watched
                    others.setdefault((table, partition), []).append(batch.future)
            size = (0 if key is None else len(key)) + (0 if value is None else len(value))
            if batch is not None and size <= max_size:
                if i not in ends:
                    # No future: the builder's append. None: the batch is full (now closed).
                    if batch._builder.append(timestamp=None, key=key, value=value) is not None:
                        continue
                else:
                    fut = batch.append(key, value, None, headers=_NO_HEADERS)
                    if fut is not None:
                        last[table, partition] = fut
                        continue
        fut = await producer.send(topic, value, key=key, partition=partition)
        if i in ends:
            last[table, partition] = fut
        else:
            others.setdefault((table, partition), []).append(fut)
        direct = _direct(producer)
        batches.clear()
    return _with_the_others(last, others)


async def _partitioned(
    producer: aiokafka.AIOKafkaProducer, records: Sequence[Record]
) -> Sequence[_Placed]:
    """The records, each with the partition ``send`` would give it where none was given: the
    producer's partitioner's choice (``_partition``, what ``send`` asks), once the topic's
    partitions are known (``partitions_for`` waits for them, and raises as ``send`` would)."""
    if all(record[2] is not None for record in records):
        return cast(Sequence[_Placed], records)  # changelog records only: placed already
    out: list[_Placed] = []
    for owner, topic, partition, key, value in records:
        if partition is None:
            if producer.client.cluster.partitions_for_topic(topic) is None:
                await producer.partitions_for(topic)
            partition = producer._partition(topic, None, key, value, key, value)
        out.append((owner, topic, partition, key, value))
    return out


def _with_the_others(
    last: dict[tuple[Any, int], asyncio.Future[Any]],
    others: dict[tuple[Any, int], list[asyncio.Future[Any]]],
) -> dict[tuple[Any, int], Delivery]:
    """Each (table, partition)'s last record's future, with the futures its other records'
    delivery is known by (`delivered`)."""
    return {where: (fut, others.get(where, [])) for where, fut in last.items()}


def delivered(earlier: Sequence[asyncio.Future[Any]]) -> BaseException | None:
    """Once the last record's future is done: the first error of the futures its other records'
    delivery is known by (done by then: delivered before it), or None when all succeeded.
    Every one is read, so that none is left with an unread error."""
    error: BaseException | None = None
    for other in earlier:
        if not other.done() or other.cancelled():  # its delivery is not known
            error = error or RuntimeError("an earlier changelog batch was not delivered")
        else:
            error = error or other.exception()
    return error


def _direct(producer: aiokafka.AIOKafkaProducer) -> bool:
    """The producer's records may skip ``send`` now: its checks would all pass."""
    accumulator = producer._message_accumulator
    if accumulator._closed or accumulator._exception is not None:
        return False  # ``add_message`` raises
    txn_manager = producer._txn_manager
    if (
        txn_manager is not None
        and txn_manager.transactional_id is not None
        and not txn_manager.is_in_transaction()
    ):
        return False  # ``send`` raises IllegalOperation
    # Serializers would change the bytes; Faust's producer has none.
    return producer._key_serializer is None and producer._value_serializer is None


def _open_batch(producer: aiokafka.AIOKafkaProducer, topic: str, partition: int) -> Any:
    """The batch ``add_message`` would append a record of this partition to, if there is one
    and ``send`` would get that far without waiting."""
    partitions = producer.client.cluster.partitions_for_topic(topic)
    if partitions is None or partition not in partitions:
        return None  # ``send`` waits for the metadata (`WorkerProducer`) or raises
    queue = producer._message_accumulator._batches.get(TopicPartition(topic, partition))
    # None or empty: ``add_message`` makes a batch (and adds the partition to the transaction).
    return queue[-1] if queue else None
