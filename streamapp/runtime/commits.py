"""Committing what a worker processed.

At-least-once, a commit takes the offsets the ledger says are processed (`offsets.OffsetLedger`),
waits until the producer has delivered what was sent so far (the processed records' output and
changelog records), and commits them; the fetch loop goes on meanwhile (one commit at a time),
so a commit that waits for the broker (one sent during a group join is answered only as the join
ends) holds no partition. A commit the broker refuses is not noted: the same offsets are
committable again, and go with the next commit. Offsets of partitions no longer assigned are
never committed by this worker: their next owner reads from what was last committed.

Under exactly_once a commit happens between records only: the fetch loop hands nothing out while
it waits until every record it handed out is processed, the producer's buffer is flushed into
the open transactions, and each partition's transaction commits its offset (Faust's
``TransactionManager.commit``). A transaction so never holds the output of a record whose offset
it does not commit, and never commits an offset whose changelog records are not in it. The
tables' writes wait in memory for that commit (transactional stores,
`streamapp.runtime.store_commits`): once they take more than ``eos_pending_writes_max_bytes``
a commit is due at once, whatever the commit interval says.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from time import monotonic
from typing import TYPE_CHECKING

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata
from faust.types import TP

from streamapp.settings import StreamappSettings

if TYPE_CHECKING:
    from streamapp.runtime.consumer import Consumer
    from streamapp.runtime.loop import FetchLoop

logger = logging.getLogger(__name__)


class Committer:
    """When and how the worker commits (see the module)."""

    def __init__(self, consumer: Consumer, loop: FetchLoop) -> None:
        self.consumer = consumer
        self.fetch_loop = loop
        self.app = consumer.app
        self.last_commit = monotonic()
        self._in_flight: asyncio.Task[bool] | None = None
        #: A commit asked by another task under exactly_once: the loop makes it next round.
        self.requested = False
        self.refused = 0
        #: Commits made early under exactly_once, the pending writes being full.
        self.early_commits = 0
        #: Under exactly_once: transactions committed, and the most memory the tables' pending
        #: writes took at a commit, for the worker's last line (`summary`).
        self.transactions = 0
        self.pending_peak_bytes = 0

    def due(self) -> bool:
        consumer = self.consumer
        every = consumer.commit_every
        return (
            self.requested
            or monotonic() - self.last_commit >= consumer.commit_interval
            or (every is not None and consumer.ledger.acks_since_reset >= every)
            or (consumer.in_transaction and self.pending_writes_full())
        )

    def pending_writes_full(self) -> bool:
        """Whether the tables' writes waiting for a commit take more memory than
        ``eos_pending_writes_max_bytes`` allows."""
        pending = self._pending_bytes()
        if pending is None or pending < self._pending_limit():
            return False
        self.early_commits += 1
        return True

    def _pending_bytes(self) -> int | None:
        pending_bytes = getattr(self.app.tables, "pending_bytes", None)
        return None if pending_bytes is None else int(pending_bytes())

    def _pending_limit(self) -> int:
        settings = getattr(self.app, "streamapp_settings", None)
        if settings is None:
            return StreamappSettings.eos_pending_writes_max_bytes
        return int(settings.eos_pending_writes_max_bytes)

    def summary(self) -> str | None:
        """Under exactly_once, one line on the transactions and the pending writes' memory, to
        size ``eos_pending_writes_max_bytes`` by; None if no transaction committed."""
        if not self.transactions:
            return None
        return (
            f"streamapp: exactly_once: {self.transactions} commits; the tables' writes waiting "
            f"for a commit took at most {self.pending_peak_bytes:,} bytes "
            f"(eos_pending_writes_max_bytes {self._pending_limit():,}; "
            f"{self.early_commits} commits made early)"
        )

    async def maybe_commit(self) -> None:
        """The fetch loop's commit, when one is due."""
        if not self.due():
            return
        self.requested = False
        self.consumer.ledger.acks_since_reset = 0
        self.last_commit = monotonic()
        if self.consumer.in_transaction:
            await self.commit_between_records(None, start_new_transaction=True)
            return
        if self._in_flight is None or self._in_flight.done():
            self._in_flight = asyncio.ensure_future(self.commit_processed(None))

    async def commit(self, tps: set[TP] | None, start_new_transaction: bool) -> bool:
        """A commit asked by any task (``Consumer.commit``)."""
        if not self.consumer.in_transaction:
            return await self.commit_processed(tps)
        if self._in_loop() or not self.consumer.commands.taking:
            return await self.commit_between_records(tps, start_new_transaction)
        # Another task: the loop may be waiting for that very task to take a record, so the
        # commit is left to the loop's next round rather than awaited here.
        self.requested = True
        self.consumer.commands.pending.set()
        return False

    def _in_loop(self) -> bool:
        task = self.fetch_loop.task
        return task is not None and asyncio.current_task() is task

    def _assigned(self, offsets: dict[TP, int]) -> dict[TP, int]:
        assigned = self.consumer.assigned
        return {tp: offset for tp, offset in offsets.items() if tp in assigned}

    async def commit_processed(self, tps: Iterable[TP] | None) -> bool:
        """At-least-once: commit the processed prefix of each partition (of ``tps``, or all)."""
        offsets = self._assigned(self.consumer.ledger.committable(tps))
        if not offsets:
            return False
        await self.app.producer.flush()
        client = self.fetch_loop.client
        if client is None:
            return False
        try:
            await client.commit(
                {
                    TopicPartition(tp.topic, tp.partition): OffsetAndMetadata(off, "")
                    for tp, off in offsets.items()
                }
            )
        except KafkaError as exc:
            # Committed again with the next commit (the ledger keeps them committable).
            self.refused += 1
            logger.info("streamapp: a commit was refused (%r); it goes with the next one", exc)
            return False
        self._committed(offsets)
        return True

    async def commit_between_records(
        self, tps: Iterable[TP] | None, start_new_transaction: bool
    ) -> bool:
        """Exactly_once: wait until everything handed out is processed, flush the producer into
        the transactions, commit each partition's transaction with its offset."""
        consumer = self.consumer
        ledger = consumer.ledger
        partitions = None if tps is None else set(tps)
        settled = await consumer.wait_for_acks(
            lambda: ledger.pending(partitions) == 0, self.app.conf.broker_session_timeout
        )
        if not settled:
            logger.warning(
                "streamapp: records handed out were not processed within the session timeout; "
                "the commit waits for the next round"
            )
            self.requested = True
            return False
        await self.app.producer.flush()
        offsets = self._assigned(ledger.committable(partitions))
        if not offsets:
            return False
        pending = self._pending_bytes()
        if pending is not None:
            self.pending_peak_bytes = max(self.pending_peak_bytes, pending)
        # aiokafka's transactional producer takes its own TopicPartition only.
        committed = await consumer.transactions.commit(
            {TopicPartition(tp.topic, tp.partition): off for tp, off in offsets.items()},
            start_new_transaction=start_new_transaction,
        )
        if committed:
            self.transactions += 1
            self._committed(offsets)
        return bool(committed)

    def _committed(self, offsets: dict[TP, int]) -> None:
        self.consumer.ledger.committed(offsets)
        self.app.tables.on_commit(offsets)
        self.app.monitor.on_tp_commit(offsets)

    async def wait_in_flight(self) -> None:
        task = self._in_flight
        if task is not None and not task.done():
            await asyncio.gather(task, return_exceptions=True)
