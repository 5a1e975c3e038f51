"""Under exactly_once, what an agent sends while it processes a record is in that record's
transaction.

Faust's exactly_once ``TransactionManager.send`` (where ``Topic.send``, ``send_soon``,
``Agent.send`` and ``Event.forward`` end up) picks a transaction by the record's
*destination*: the partition it goes to, named as if it were a partition of a source topic.
For an output topic the app does not consume the consumer knows no partitions, so there is no
transaction at all: the record goes out on the plain producer, and after a crash the records
whose offsets were not committed are processed again and their output is sent again
(duplicates, even to a read_committed reader). For a destination that is a source partition,
the transaction is that partition's: another task's, perhaps on another worker.

Kafka Streams sends a task's output in the task's transaction, the one that commits the input
offset and the changelog writes; so does `TransactionManager.send` here: while a record is
being processed (Faust's ``current_event()``, or the source a buffered message was sent for)
the send goes in the transaction of that record's partition. A send made outside any record
(a timer, a web view, a task of its own) is Faust's, unchanged. ``streamapp.joins`` and the
dead letters of ``streamapp.bad_records`` send through `send_for_source` too.

Its ``commit`` answers whether every transaction committed: Faust's answers True when one was
fenced (it crashes the app then) or had no producer left (fenced earlier, skipped with a
warning), though its offsets and writes did not commit; a transactional store stores the
writes of committed transactions only (`streamapp.runtime.store_commits`).

``Topic.send_soon`` puts a message in the producer's buffer, which another task publishes
without the current event: `streamapp.bad_records.Topic` notes the source of each such message
(`note_source`) and publishes it under that source (`publishing_for`).

A commit commits the source partitions' transactions concurrently rather than one after the
other (`TransactionManager.commit`).

A source partition's transaction is named by Faust's rule (`transactional_id`: its
``transactional_id_format``, with the partition's topic group), and each transaction's producer
and lock are the app producer's (`streamapp.runtime.producer.app_producer.AppProducer`).
Delete when Faust's TransactionManager sends a record made while processing another in the
transaction of the latter, and its commit commits the transactions concurrently and says when
one did not commit.
Tests: tests/unit/streamapp/sending/test_sends.py; tests/integration/test_eos_sends.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from weakref import WeakKeyDictionary

from aiokafka.errors import ProducerFenced
from faust import current_event
from faust.transport.consumer import TopicPartitionGroup
from faust.transport.consumer import TransactionManager as FaustTransactionManager
from faust.types import TP, AppT, FutureMessage, RecordMetadata
from faust.types.core import HeadersArg

from streamapp.runtime.producer.app_producer import AppProducer

logger = logging.getLogger(__name__)

#: The source record's partition of a send published away from its event (a buffered one).
_publishing_for: ContextVar[TP | None] = ContextVar("streamapp_publishing_for", default=None)

#: send_soon's buffered messages -> the partition of the record they were sent for.
_buffered_sources: WeakKeyDictionary[FutureMessage, TP] = WeakKeyDictionary()


def current_source() -> TP | None:
    """The partition of the record this send is made for, or None outside any record."""
    noted = _publishing_for.get()
    if noted is not None:
        return noted
    event = current_event()
    if event is None:
        return None
    topic = getattr(event.message, "topic", None)
    partition = getattr(event.message, "partition", None)
    if not isinstance(topic, str) or not isinstance(partition, int) or partition < 0:
        return None  # an in-memory channel's event: no partition, no transaction
    return TP(topic, partition)


def transactional_id(app: AppT, tp: TP) -> str:
    """The id of the transaction Faust's transaction manager begins and commits for the active
    partition ``tp`` (``{app id}-{topic group}-{partition}``); KeyError for a topic no agent
    consumes (the assignor knows no group of it)."""
    group = TopicPartitionGroup(tp.topic, tp.partition, app.assignor.group_for_topic(tp.topic))
    return FaustTransactionManager.transactional_id_format.format(tpg=group, group_id=app.conf.id)


def source_transactional_id(app: AppT, source: TP) -> str | None:
    """The id of the transaction Faust commits ``source``'s offsets in, or None if it commits
    none for it (a topic no agent consumes as a stream, or a standby)."""
    try:
        if app.assignor.is_standby(source):
            return None
        return transactional_id(app, source)
    except KeyError:  # the assignor's group_for_topic: not a source topic
        return None


async def send_for_source(
    app: AppT,
    source: TP,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    partition: int | None = None,
    timestamp: float | None = None,
    headers: HeadersArg | Sequence[tuple[str, bytes]] | None = None,
) -> Awaitable[RecordMetadata]:
    """Send on behalf of a record of ``source``: under exactly_once in its transaction (an
    error if this worker has none for it), otherwise on the app's producer. Returns the
    delivery future."""
    hdrs: Any = list(headers) if isinstance(headers, Sequence) else headers
    if app.in_transaction:
        tid = source_transactional_id(app, source)
        if tid is None:
            raise ValueError(f"no transaction commits {source}: not an active source partition")
        sent: Awaitable[RecordMetadata] = await app.producer.send(
            topic, key, value, partition, timestamp, hdrs, transactional_id=tid
        )
        return sent
    producer = await app.maybe_start_producer()
    sent = await producer.send(topic, key, value, partition, timestamp, hdrs)
    return sent


class TransactionManager(FaustTransactionManager):
    """Faust's, but a send made for a record goes in that record's transaction, and a commit
    commits the partitions' transactions side by side (`commit`)."""

    async def commit(self, offsets: Mapping[TP, int], start_new_transaction: bool = True) -> bool:
        """Commit each source partition's offsets in its transaction, which then commits, and
        the next begins (Faust's commit), the transactions concurrently; True only if every
        transaction committed (see the module).

        Faust commits them one after the other, each waiting for its records' delivery and
        three round trips to the transaction coordinator; the fetch loop hands nothing out
        meanwhile (`streamapp.runtime.commits`). Each transaction commits on its own producer
        under its own lock, as Faust's does: one partition's commit never waits for another's.
        A fenced producer crashes the app, as Faust's commit does, once every commit has ended;
        any other error is raised then.
        """
        app = self.app
        group_id = app.conf.id
        by_transaction: dict[str, dict[TP, int]] = {}
        for tp, offset in offsets.items():
            by_transaction.setdefault(transactional_id(app, tp), {})[tp] = offset
        if not by_transaction:
            return True
        producer = self.producer
        if not isinstance(producer, AppProducer):
            raise TypeError(f"streamapp's transaction manager needs its own producer: {producer!r}")
        missing = sorted(tid for tid in by_transaction if producer.transaction_client(tid) is None)

        async def commit_one(tid: str, tid_offsets: dict[TP, int]) -> None:
            async with producer.transaction_lock(tid):
                transaction_producer = producer.transaction_client(tid)
                if transaction_producer is None:
                    return  # fenced earlier: reported below
                await transaction_producer.send_offsets_to_transaction(tid_offsets, group_id)
                await transaction_producer.commit_transaction()
                if start_new_transaction:
                    await transaction_producer.begin_transaction()

        results = await asyncio.gather(
            *(commit_one(tid, tid_offsets) for tid, tid_offsets in by_transaction.items()),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        fenced = next((e for e in errors if isinstance(e, ProducerFenced)), None)
        if fenced is not None:
            logger.warning("streamapp: a transaction was fenced by another worker: %r", fenced)
            await app.crash(fenced)
            return False
        if errors:
            raise errors[0]
        if missing:
            logger.warning(
                "streamapp: transactions %s have no producer (fenced by another worker): their "
                "offsets and table writes are not committed",
                ", ".join(missing),
            )
            return False
        return True

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        timestamp: float | None,
        headers: HeadersArg | None,
        *,
        transactional_id: str | None = None,
    ) -> Awaitable[RecordMetadata]:
        source = current_source()
        tid = source_transactional_id(self.app, source) if source is not None else None
        if tid is None:  # not made for a record: Faust's choice
            return await super().send(
                topic, key, value, partition, timestamp, headers, transactional_id=transactional_id
            )
        return await self.producer.send(
            topic, key, value, partition, timestamp, headers, transactional_id=tid
        )


def note_source(fut: FutureMessage) -> None:
    """Remember the record ``fut`` is sent for, if any, for when the buffer publishes it."""
    source = current_source()
    if source is not None:
        _buffered_sources[fut] = source


@contextmanager
def publishing_for(fut: FutureMessage) -> Iterator[None]:
    """Publish ``fut`` as sent for the record noted by `note_source` (if one was)."""
    source = _buffered_sources.pop(fut, None)
    if source is None:
        yield
        return
    token = _publishing_for.set(source)
    try:
        yield
    finally:
        _publishing_for.reset(token)
