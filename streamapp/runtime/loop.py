"""The fetch loop: the one task that owns a worker's aiokafka consumer.

Each round of the loop, in this order and nowhere else:

1. runs the commands other tasks queued (`commands.Commands`): a rebalance's steps, a seek, an
   exactly_once commit;
2. decides which partitions it reads: the stream partitions whose records may be handed out
   (`Consumer.stream_partitions`: not paused, not held for a recovery, not being given up, flow
   running) and the changelog partitions the table manager replays; aiokafka fetches those and
   no others (the rest are paused in aiokafka, so no fetch runs ahead of them);
3. takes records partition by partition, at most `RECORDS_PER_PARTITION` of each and
   `RECORDS_PER_ROUND` in all, starting each round one partition further on, so that a
   partition with a backlog (one just gained) never holds the others for more than its share;
   changelog records have a share of their own (`CHANGELOG_RECORDS_PER_ROUND`);
4. applies changelog records to their tables and hands stream records to the conductor, in
   the order of the app's ``ConsumerScheduler`` (by timestamp across partitions,
   `streamapp.scheduling`); the conductor decodes each and puts it in its streams' queues
   (awaiting room in a full queue: back-pressure); a topic one stream reads has its records
   decoded and put in that stream's queue directly, as the conductor would
   (`direct_delivery`);
5. commits when it is time (`commits.Committer`).

aiokafka keeps fetched records it was not asked for in its buffer, and drops a paused or sought
partition's buffered records while its position stays at the first of them: a record is taken
from aiokafka only as it is handed out or applied, so pausing, seeking or giving up a partition
between two rounds loses nothing and hands nothing out twice.

A wait for records ends early when a command is queued: the coordinator's rebalance callbacks
wait for the loop, and must not wait for a fetch timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from time import monotonic
from typing import TYPE_CHECKING, Any

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import ConsumerStoppedError, IllegalStateError
from faust.transport.conductor import Conductor
from faust.types import TP

from streamapp.runtime import clients, positions
from streamapp.runtime.commits import Committer
from streamapp.runtime.direct_delivery import DirectDelivery
from streamapp.runtime.group.consumer import WorkerConsumer
from streamapp.runtime.messages import consumer_message
from streamapp.runtime.offsets_reader import OffsetsReader
from streamapp.runtime.rebalance import RebalanceListener

if TYPE_CHECKING:
    from streamapp.runtime.consumer import Consumer

logger = logging.getLogger(__name__)

#: Stream records taken from one partition in one round.
RECORDS_PER_PARTITION = 50
#: Stream records taken in one round, over every partition.
RECORDS_PER_ROUND = 100
#: Changelog records applied in one round, over every replayed partition: a replica catching
#: up takes at most this much of a round from the stream partitions.
CHANGELOG_RECORDS_PER_ROUND = 1000
#: How long one wait for records lasts when nothing arrives (a queued command ends it sooner).
FETCH_WAIT_S = 1.0
#: The same while a rebalance's restore is under way: a changelog's end may lie past records
#: that are never handed out (transaction markers), which only a look at the position shows.
RESTORE_FETCH_WAIT_S = 0.1
#: How long a fetch request waits at the broker while records are left in hand or a restore
#: is under way (aiokafka's, otherwise). aiokafka sends one request at a time to a broker, and
#: leaves out of it a partition whose fetched records are not all taken: a request built then
#: for the other partitions, idle ones, held the busy partition back for the whole wait (1.5 s),
#: and a replay's first fetch after a rebalance's seek waited for the request in flight.
BUSY_FETCH_WAIT_MS = 100


def _tp(tp: TP) -> TopicPartition:
    return TopicPartition(tp.topic, tp.partition)


class FetchLoop:
    """The loop's state and its steps (see the module)."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.app = consumer.app
        self.client: WorkerConsumer | None = None
        self.offsets = OffsetsReader(self.app)
        self.committer = Committer(consumer, self)
        self.task: asyncio.Task[None] | None = None
        self._idle_fetch_wait_ms = clients.FETCH_MAX_WAIT_MS
        self._stop = asyncio.Event()
        self._start_at = 0  # where the next round's partition order starts
        #: Records handed to the streams / changelog records applied, since the start.
        self.handed_out = 0
        self.applied = 0
        #: Topic -> its direct delivery (`direct_delivery`), for the conductor's channels then.
        self._delivery_by_topic: dict[str, DirectDelivery | None] = {}
        self._delivery_channels: frozenset[Any] = frozenset()

    # -- life --------------------------------------------------------------------------------

    async def open(self) -> None:
        """Create and start the aiokafka consumer (it joins the group once subscribed)."""
        self.client = clients.worker_consumer(self.app, self.consumer.transport)
        self._idle_fetch_wait_ms = self.client.fetch_wait_ms
        await self.client.start()
        await self.offsets.start(self.consumer.transport)
        self.task = asyncio.ensure_future(self._run())

    async def subscribe(self, topics: set[str]) -> None:
        if self.client is None:
            raise ConsumerStoppedError("the consumer has not started")
        self.client.subscribe(topics=sorted(topics), listener=RebalanceListener(self.consumer))

    def request_close(self) -> None:
        """Stop fetching (the app stops while a rebalance comes)."""
        self._stop.set()
        self.consumer.commands.pending.set()

    async def stop_fetching(self) -> None:
        """End the loop's task (records handed out stay in the streams' queues)."""
        self.request_close()
        task = self.task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=FETCH_WAIT_S * 2)
            except TimeoutError:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def close(self) -> None:
        await self.stop_fetching()
        summary = self.committer.summary()
        if summary is not None:
            logger.info("%s", summary)
        # The leader's metadata refreshes of topics a plan left out run through this consumer:
        # they end before it stops.
        stop_refreshes = getattr(self.app.assignor, "on_consumer_thread_stop", None)
        if stop_refreshes is not None:
            await stop_refreshes()
        client, self.client = self.client, None
        if client is not None:
            await client.stop()
        await self.offsets.stop()

    # -- the rounds --------------------------------------------------------------------------

    async def _run(self) -> None:
        commands = self.consumer.commands
        commands.taking = True
        try:
            while not self._stop.is_set():
                await commands.run_queued()
                if self._stop.is_set():
                    break
                await self._round()
        except ConsumerStoppedError:
            if not self.app.should_stop:
                raise
        except asyncio.CancelledError:
            if not self.app.should_stop and not self._stop.is_set():
                raise
        except Exception as exc:
            logger.exception("streamapp: the fetch loop failed: %r", exc)
            await self.app.crash(exc)
        finally:
            await commands.stop_taking()

    async def _round(self) -> None:
        client = self.client
        assert client is not None
        consumer = self.consumer
        streams = consumer.stream_partitions()
        changelogs = self.app.tables.partitions_to_read()  # type: ignore[attr-defined]
        wanted = streams | changelogs
        self._pause_all_but(wanted)
        if not wanted:
            await self.app.tables.after_round()  # type: ignore[attr-defined]
            if not consumer.stream_partitions() and not self.app.tables.partitions_to_read():  # type: ignore[attr-defined]
                await self._wait_for_command(FETCH_WAIT_S)
            await self.committer.maybe_commit()
            return
        taken, left_in_hand = await self._take(client, streams, changelogs)
        restoring = self.app.tables.recovery.in_recovery  # type: ignore[attr-defined]
        client.fetch_wait_ms = (
            BUSY_FETCH_WAIT_MS if left_in_hand or restoring else self._idle_fetch_wait_ms
        )
        if not taken:
            # Nothing buffered: wait for records of any wanted partition, or a command.
            taken = await self._wait_for_records(client, wanted)
        to_hand_out: dict[TP, list[ConsumerRecord[Any, Any]]] = {}
        for tp, records in taken.items():
            if tp in changelogs:
                await self.app.tables.apply_records(tp, records)  # type: ignore[attr-defined]
                self.applied += len(records)
            elif tp in streams:
                to_hand_out[tp] = records
            else:
                self._seek_back(tp, records[0].offset)
        if to_hand_out:
            await self._hand_out(to_hand_out)
        await self.app.tables.after_round()  # type: ignore[attr-defined]
        await self.committer.maybe_commit()

    def _pause_all_but(self, wanted: set[TP]) -> None:
        client = self.client
        assert client is not None
        assignment = client.assignment()
        wanted_kafka = {_tp(tp) for tp in wanted}
        paused = client.paused()
        to_pause = [tp for tp in assignment if tp not in wanted_kafka and tp not in paused]
        to_resume = [tp for tp in paused if tp in wanted_kafka]
        if to_pause:
            client.pause(*to_pause)
        if to_resume:
            client.resume(*to_resume)

    async def _take(
        self, client: WorkerConsumer, streams: set[TP], changelogs: set[TP]
    ) -> tuple[dict[TP, list[ConsumerRecord[Any, Any]]], bool]:
        """Records already fetched, within the round's shares, partition by partition; and
        whether a share was used up (records likely left in hand)."""
        taken: dict[TP, list[ConsumerRecord[Any, Any]]] = {}
        full = False
        order = sorted(streams)
        if order:
            start = self._start_at % len(order)
            self._start_at += 1
            order = order[start:] + order[:start]
        left = RECORDS_PER_ROUND
        for tp in order:
            if left <= 0:
                break
            share = min(RECORDS_PER_PARTITION, left)
            got = await client.getmany(_tp(tp), timeout_ms=0, max_records=share)
            records = got.get(_tp(tp))
            if records:
                taken[tp] = records
                left -= len(records)
                full = full or len(records) >= share
        left = CHANGELOG_RECORDS_PER_ROUND
        for tp in sorted(changelogs):
            if left <= 0:
                break
            got = await client.getmany(_tp(tp), timeout_ms=0, max_records=left)
            records = got.get(_tp(tp))
            if records:
                taken[tp] = records
                full = full or len(records) >= left
                left -= len(records)
        return taken, full

    async def _wait_for_records(
        self, client: WorkerConsumer, wanted: set[TP]
    ) -> dict[TP, list[ConsumerRecord[Any, Any]]]:
        commands = self.consumer.commands
        if commands.pending.is_set():
            return {}
        restoring = self.app.tables.recovery.in_recovery  # type: ignore[attr-defined]
        wait = RESTORE_FETCH_WAIT_S if restoring else FETCH_WAIT_S
        fetch = asyncio.ensure_future(
            client.getmany(
                *(_tp(tp) for tp in wanted),
                timeout_ms=int(wait * 1000),
                max_records=RECORDS_PER_PARTITION,
            )
        )
        woken = asyncio.ensure_future(commands.pending.wait())
        try:
            await asyncio.wait({fetch, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            if not fetch.done():
                # aiokafka takes buffered records only as it returns them: nothing is lost.
                fetch.cancel()
                await asyncio.gather(fetch, return_exceptions=True)
        if fetch.cancelled():
            return {}
        got = fetch.result()
        return {TP(tp.topic, tp.partition): records for tp, records in got.items() if records}

    async def _wait_for_command(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.consumer.commands.pending.wait(), timeout)

    async def _hand_out(self, taken: Mapping[TP, list[ConsumerRecord[Any, Any]]]) -> None:
        """Hand the round's stream records to the conductor, in the order of the app's
        ``ConsumerScheduler`` (by default by timestamp across partitions, `streamapp.scheduling`),
        each partition's in offset order. A partition paused, held or given up before its
        first record goes out is sought back to that record instead."""
        consumer = self.consumer
        callback = consumer.callback
        deliveries = self._deliveries(taken)
        ledger = consumer.ledger
        handed_out = ledger.handed_out
        admit = ledger.admit
        generation = self.app.consumer_generation_id
        acks_enabled_for = self.app.topics.acks_enabled_for
        #: Per partition: whether its records go out (decided at its first record), and, for
        #: one that does, whether they are tracked.
        goes_out: dict[TP, bool] = {}
        tracked: dict[TP, bool] = {}
        for tp, record in consumer.scheduler.iterate(taken):
            if tp not in goes_out:
                goes_out[tp] = tp in consumer.stream_partitions()
                if not goes_out[tp]:
                    # Paused, held or given up while this round ran: back to the first of them.
                    self._seek_back(tp, taken[tp][0].offset)
                # Tracked as handed out (Faust's conductor does so before it delivers): counted
                # in the monitor whatever comes of the record (one that does not decode too),
                # and a stop waits for records still queued in the streams.
                tracked[tp] = acks_enabled_for(tp.topic)
            if not goes_out[tp] or not admit(tp, record.offset):
                continue  # handed out already: records dropped before it come once more
            message = consumer_message(tp, record, time_in=monotonic(), generation_id=generation)
            handed_out(tp, record.offset, message)
            if tracked[tp]:
                message.tracked = True
                consumer.track_message(message)
            self.handed_out += 1
            delivery = deliveries.get(tp.topic)
            if delivery is None or not await delivery.deliver(message):
                await callback(message)

    def _deliveries(
        self, taken: Mapping[TP, list[ConsumerRecord[Any, Any]]]
    ) -> dict[str, DirectDelivery | None]:
        """Each topic's direct delivery to the one stream that reads it (None: the conductor's),
        kept while the conductor's channels stay the same."""
        conductor = self.app.topics
        if not isinstance(conductor, Conductor):
            return {}  # not Faust's: its own hand-out
        channels = frozenset(conductor)
        if channels != self._delivery_channels:
            self._delivery_channels = channels
            self._delivery_by_topic = {}
        found = self._delivery_by_topic
        for tp in taken:
            if tp.topic not in found:
                found[tp.topic] = DirectDelivery.for_topic(self.app, tp.topic)
        return found

    def _seek_back(self, tp: TP, offset: int) -> None:
        client = self.client
        if client is None:
            return
        # No longer assigned: its next owner reads it from the committed offset.
        with contextlib.suppress(IllegalStateError):
            client.seek(_tp(tp), offset)

    # -- positions (commands run these in the loop's task) -------------------------------------

    async def rewind(self, tps: Iterable[TP]) -> None:
        """Seek each partition back to its first record dropped unprocessed (`flow.FlowControl`),
        from where the ledger lets those records out once more and nothing else twice."""
        client = self.client
        if client is None:
            return
        for tp in sorted(tps):
            if tp not in self.consumer.assigned or tp in self.consumer.giving_up:
                continue
            found = self.consumer.ledger.rewind(tp)
            if found is None:
                continue
            first, count = found
            logger.warning(
                "streamapp: %s[%d]: %d record(s) dropped from a stream queue unprocessed; the "
                "partition goes back to %d to process them",
                tp.topic,
                tp.partition,
                count,
                first,
            )
            self._seek_back(tp, first)

    async def seek(self, offsets: Mapping[TP, int]) -> None:
        """Move each partition's position (a stream partition's records handed out before
        count no more: see `Consumer.seek`)."""
        client = self.client
        assert client is not None
        for tp, offset in offsets.items():
            client.seek(_tp(tp), offset)

    async def seek_to_committed(self, tps: Iterable[TP]) -> dict[TP, int]:
        """Seek stream partitions to their committed offsets (`positions.seek_to_committed`):
        nothing handed out before counts for their commits any more. Returns the committed
        offsets (-1: none)."""
        client = self.client
        assert client is not None
        found = await positions.seek_to_committed(
            client, (_tp(tp) for tp in tps), self.app.conf.consumer_auto_offset_reset
        )
        committed: dict[TP, int] = {}
        for kafka_tp, offset in found.items():
            tp = TP(kafka_tp.topic, kafka_tp.partition)
            committed[tp] = -1 if offset is None else offset
            self.consumer.ledger.restart(tp, offset)
        return committed

    async def position(self, tp: TP) -> int | None:
        client = self.client
        if client is None:
            return None
        try:
            position: int = await client.position(_tp(tp))
        except IllegalStateError:
            return None
        return position

    def highwater(self, tp: TP) -> int:
        client = self.client
        if client is None:
            return -1
        try:
            found = client.highwater(_tp(tp))
        except IllegalStateError:
            return -1
        return -1 if found is None else int(found)

    def topic_partitions(self, topic: str) -> int | None:
        client = self.client
        if client is None:
            return None
        partitions = client.partitions_for_topic(topic)
        return len(partitions) if partitions else None

    def generation(self) -> int:
        client = self.client
        return clients.generation(client) if client is not None else -1

    def seconds_since(self, when: float) -> float:
        return monotonic() - when
