"""The consumer Faust's app, streams and tables talk to (``app.consumer``): streamapp's own
implementation of Faust's `ConsumerT`, on aiokafka's public consumer API.

This class holds what the rest of the worker may ask or change: the assignment, the partitions
paused, the records handed out and which of them were processed (`offsets.OffsetLedger`). It
does not read from Kafka itself: the fetch loop (`loop.FetchLoop`) does, as the one task that
owns the aiokafka consumer. Every call here that would move a position (a seek, a commit that
must happen between records) becomes a command the loop runs between two of its rounds
(`commands.Commands`), so no two tasks ever interleave their steps on one consumer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from time import monotonic
from typing import Any, ClassVar, cast
from weakref import WeakSet

from aiokafka.errors import ConsumerStoppedError
from aiokafka.partitioner import DefaultPartitioner
from faust.types import TP, AppT, Message
from faust.types.transports import (
    ConsumerCallback,
    ConsumerT,
    PartitionsAssignedCallback,
    PartitionsRevokedCallback,
    TPorTopicSet,
    TransportT,
)
from mode import Service

from streamapp.runtime.commands import Commands
from streamapp.runtime.offsets import OffsetLedger

logger = logging.getLogger(__name__)


class Consumer(Service, ConsumerT):
    """streamapp's consumer (see the module): state and requests; the loop does the reading."""

    consumer_stopped_errors: ClassVar[tuple[type[BaseException], ...]] = (ConsumerStoppedError,)

    def __init__(
        self,
        transport: TransportT,
        callback: ConsumerCallback,
        on_partitions_revoked: PartitionsRevokedCallback,
        on_partitions_assigned: PartitionsAssignedCallback,
        *,
        commit_interval: float | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        **kwargs: Any,
    ) -> None:
        self.transport = transport
        self.app: AppT = transport.app
        conf = self.app.conf
        self.in_transaction = bool(self.app.in_transaction)
        #: The conductor's ``on_message``: decodes a record and puts it in its streams' queues.
        self.callback = callback
        # Faust's app rebalance handlers are not used: the rebalance is streamapp's
        # (`streamapp.runtime.rebalance`), step by step with the fetch loop.
        self.commit_interval = commit_interval or conf.broker_commit_interval
        self.commit_every: int | None = conf.broker_commit_every
        self.scheduler = conf.ConsumerScheduler()  # type: ignore[operator]
        self.randomly_assigned_topics: set[str] = set()
        self.ledger: OffsetLedger[TP] = OffsetLedger()
        self._unacked: WeakSet[Message] = WeakSet()
        self.commands = Commands()
        #: Kafka's assignment: stream and changelog partitions.
        self.assigned: set[TP] = set()
        #: Partitions paused by the app (``pause_partitions``) or a full stream queue.
        self.paused: set[TP] = set()
        self.buffer_full: set[TP] = set()
        #: Gained stream partitions held until their tables are recovered and they are sought.
        self.held: set[TP] = set()
        #: Stream partitions being given up: none of their records goes out any more.
        self.giving_up: set[TP] = set()
        self.flow_active = True
        self.topics: set[str] = set()
        self._ack_waiter: asyncio.Future[None] | None = None
        self.key_partitioner = DefaultPartitioner()
        super().__init__(loop=loop, **kwargs)
        create_transaction_manager = self.transport.create_transaction_manager  # type: ignore[attr-defined]
        self.transactions = create_transaction_manager(
            consumer=self, producer=self.app.producer, beacon=self.beacon, loop=self.loop
        )
        from streamapp.runtime.loop import FetchLoop  # these need this class first
        from streamapp.runtime.rebalance import Rebalance

        self.fetch_loop = FetchLoop(self)
        self.rebalance = Rebalance(self)
        # Found by the app's flow control and clean stop without creating a consumer, which
        # Faust's ``app.consumer`` would (`streamapp.App.streamapp_consumer`).
        self.app.streamapp_consumer = self  # type: ignore[attr-defined]

    # -- the services this one starts --------------------------------------------------------

    def on_init_dependencies(self) -> Iterable[Any]:
        return [self.transactions] if self.in_transaction else []

    async def on_start(self) -> None:
        await self.fetch_loop.open()

    async def on_stop(self) -> None:
        if self.app.conf.stream_wait_empty:
            await self.wait_empty()
        else:
            await self.commit_and_end_transactions()
        await self.fetch_loop.close()

    # -- what is handed out, and what streams processed --------------------------------------

    def is_changelog(self, tp: TP) -> bool:
        return tp.topic in self.app.tables.changelog_topics

    def stream_partitions(self) -> set[TP]:
        """The stream partitions whose records may be handed out now."""
        if not self.flow_active:
            return set()
        blocked = self.paused | self.buffer_full | self.held | self.giving_up
        return {tp for tp in self.assigned if tp not in blocked and not self.is_changelog(tp)}

    def track_message(self, message: Message) -> None:
        self._unacked.add(message)
        self.app.sensors.on_message_in(message.tp, message.offset, message)

    def ack(self, message: Message) -> bool:
        if message.acked:
            return False
        message.acked = True
        self._unacked.discard(message)
        acked = self.ledger.ack(message.tp, message.offset, message)
        waiter = self._ack_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        return acked

    def ack_batch(self, messages: Iterable[Message]) -> list[Message]:
        """Ack each message of a batch once, as each stream reading it would; return those
        whose last reference this was (Faust's ``on_message_out`` sensors are called for them)."""
        final: list[Message] = []
        for message in messages:
            if message.acked:
                continue
            if message.decref():
                continue  # another stream reads it too, and acks it later
            final.append(message)
            self.ack(message)
        return final

    def on_dropped(self, events: Iterable[Any], flowing: bool) -> None:
        """Records were dropped from the streams' queues unprocessed (``app.flow_control``'s
        clear): no stop waits for them any more; and while the flow runs on, each partition
        still held goes back to its first of them, which go out once more, and nothing else
        twice (`offsets.OffsetLedger.rewind`)."""
        partitions: set[TP] = set()
        for event in events:
            message = getattr(event, "message", None)
            if message is None or message.acked:
                continue
            self._unacked.discard(message)
            if not flowing:
                continue
            tp = message.tp
            held = tp in self.assigned and tp not in self.giving_up
            if held and self.ledger.drop(tp, message.offset, message):
                partitions.add(tp)
        if partitions:
            self.commands.submit(lambda: self.fetch_loop.rewind(partitions))

    @property
    def unacked(self) -> set[Message]:
        """Records streams have taken and not processed yet (Faust's streams add to it)."""
        return cast(set[Message], self._unacked)

    async def wait_for_acks(self, done: Any, timeout: float) -> bool:
        """Wait until ``done()`` is true, woken by each ack; False if ``timeout`` passed first."""
        deadline = monotonic() + timeout
        while not done():
            left = deadline - monotonic()
            if left <= 0 or (self.should_stop and not self.app.should_stop):
                return False
            self._ack_waiter = self.loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(self._ack_waiter), timeout=min(left, 1.0))
            except TimeoutError:
                pass
            finally:
                self._ack_waiter = None
        return True

    async def wait_empty(self) -> None:
        """Wait until every record a stream took is processed, then commit, ending the
        transactions under exactly_once (Faust's stop)."""
        await self.wait_for_acks(
            lambda: not any(not m.acked for m in list(self._unacked)),
            self.app.conf.broker_session_timeout,
        )
        await self.commit_and_end_transactions()

    def all_progress_committed(self) -> bool:
        """Whether every record processed here is covered by a commit (asked as the worker
        stops: its last commit may have failed)."""
        return not any(not m.acked for m in list(self._unacked)) and not self.ledger.committable()

    async def commit_and_end_transactions(self) -> None:
        await self.commit(start_new_transaction=False)

    # -- commits -----------------------------------------------------------------------------

    async def commit(
        self, topics: TPorTopicSet | None = None, start_new_transaction: bool = True
    ) -> bool:
        """Commit what was processed (of ``topics``, or of every partition)."""
        if self.app.client_only:
            return False
        tps = None if topics is None else self._select(topics)
        return await self.fetch_loop.committer.commit(tps, start_new_transaction)

    def _select(self, topics: TPorTopicSet) -> set[TP]:
        return {tp for tp in self.ledger.partitions() if tp in topics or tp.topic in topics}

    async def on_task_error(self, exc: BaseException) -> None:
        await self.commit()

    # -- pausing and flow --------------------------------------------------------------------

    def stop_flow(self) -> None:
        self.flow_active = False

    def resume_flow(self) -> None:
        self.flow_active = True
        self.commands.pending.set()  # the loop may fetch again

    def pause_partitions(self, tps: Iterable[TP]) -> None:
        self.paused.update(tps)

    def resume_partitions(self, tps: Iterable[TP]) -> None:
        self.paused.difference_update(tps)
        self.commands.pending.set()

    def on_buffer_full(self, tp: TP) -> None:
        self.buffer_full.add(tp)

    def on_buffer_drop(self, tp: TP) -> None:
        if tp in self.buffer_full:
            self.buffer_full.discard(tp)
            self.commands.pending.set()

    # -- positions ---------------------------------------------------------------------------

    async def perform_seek(self) -> None:
        """Seek every assigned stream partition to its committed offset."""
        tps = {tp for tp in self.assigned if not self.is_changelog(tp)}
        await self.commands.run(lambda: self.fetch_loop.seek_to_committed(tps))

    async def seek_to_committed(self) -> Mapping[TP, int]:
        tps = {tp for tp in self.assigned if not self.is_changelog(tp)}
        return await self.commands.run(lambda: self.fetch_loop.seek_to_committed(tps))

    async def seek(self, partition: TP, offset: int) -> None:
        await self.seek_wait({partition: offset})

    async def seek_wait(self, partitions: Mapping[TP, int]) -> None:
        """Move positions; records of those partitions handed out before no longer count for
        their commits (they may be handed out again)."""
        offsets = dict(partitions)

        async def seek() -> None:
            await self.fetch_loop.seek(offsets)
            for tp in offsets:
                if not self.is_changelog(tp):
                    self.ledger.restart(tp, self.ledger.last_committed(tp))

        await self.commands.run(seek)

    async def position(self, tp: TP) -> int | None:
        return await self.fetch_loop.position(tp)

    # -- what the cluster says ---------------------------------------------------------------

    def assignment(self) -> set[TP]:
        return set(self.assigned)

    def highwater(self, tp: TP) -> int:
        return self.fetch_loop.highwater(tp)

    async def highwaters(self, *partitions: TP) -> Mapping[TP, int]:
        return await self.fetch_loop.offsets.ends(partitions)

    async def earliest_offsets(self, *partitions: TP) -> Mapping[TP, int]:
        return await self.fetch_loop.offsets.starts(partitions)

    def topic_partitions(self, topic: str) -> int | None:
        return self.fetch_loop.topic_partitions(topic)

    def key_partition(
        self, topic: str, key: bytes | None, partition: int | None = None
    ) -> int | None:
        """The partition a record of ``key`` goes to in ``topic`` (None: topic unknown here)."""
        count = self.topic_partitions(topic)
        if count is None:
            return None
        if partition is not None:
            if not 0 <= partition < count:
                raise ValueError(f"{topic} has no partition {partition}")
            return partition
        every = list(range(count))
        return int(self.key_partitioner(key, every, every))

    def paused_streams(self) -> set[TP]:
        """Stream partitions of the assignment not processed now: paused, or held while the
        tables of a rebalance recover (none outside a rebalance)."""
        return {tp for tp in (self.paused | self.held) & self.assigned if not self.is_changelog(tp)}

    # -- the group ---------------------------------------------------------------------------

    def membership(self) -> tuple[str | None, int | None]:
        """Kafka's member id and generation of this worker (None, None: not in the group)."""
        client = self.fetch_loop.client
        if client is None:
            return None, None
        member_id, generation = client.membership()
        return (member_id, generation) if member_id else (None, None)

    def request_rebalance(self) -> None:
        """Ask the group to rebalance (a follow-up rebalance)."""
        client = self.fetch_loop.client
        if client is not None:
            client.request_rejoin()

    async def refresh_metadata(self) -> None:
        """Fresh cluster metadata (a topic created or resized since the consumer last asked)."""
        client = self.fetch_loop.client
        if client is not None:
            await client.refresh_metadata()

    def refresh_metadata_soon(self) -> None:
        """`refresh_metadata`, from code that cannot await it."""
        self.add_future(self.refresh_metadata())

    # -- subscription ------------------------------------------------------------------------

    async def subscribe(self, topics: Iterable[str]) -> None:
        self.topics = set(topics)
        await self.fetch_loop.subscribe(self.topics)

    async def create_topic(
        self,
        topic: str,
        partitions: int,
        replication: int,
        *,
        config: Mapping[str, Any] | None = None,
        timeout: Any = 30.0,
        retention: Any = None,
        compacting: bool | None = None,
        deleting: bool | None = None,
        ensure_created: bool = False,
    ) -> None:
        await self.app.producer.create_topic(
            topic,
            partitions,
            replication,
            config=config,
            timeout=timeout,
            retention=retention,
            compacting=compacting,
            deleting=deleting,
            ensure_created=ensure_created,
        )

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        """Not used: the fetch loop hands records to the conductor itself."""
        raise NotImplementedError("streamapp's fetch loop owns the consumer")
        yield  # pragma: no cover  (an async generator, as ConsumerT declares)

    def close(self) -> None:
        self.fetch_loop.request_close()

    def verify_recovery_event_path(self, now: float, tp: TP) -> None:
        return None
