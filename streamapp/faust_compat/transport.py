"""Faust's aiokafka transport, with the fixes streamapp depends on.

1. The worker's consumer always runs our assignor. Faust's
   ``AIOKafkaConsumerThread._create_worker_consumer`` hands aiokafka the app's assignor only when
   the app has changelog tables or standby replicas, and aiokafka's round robin otherwise. A
   streamapp group must speak one protocol whatever each app defines (a worker with round robin
   would be refused by the group, or would ignore co-partitioning and stickiness), so the choice
   is overridden after Faust built the consumer (it is not started yet, so nothing used it).
   Delete when Faust hands its consumer the app's assignor whatever the app defines.
   Test: tests/unit/streamapp/faust_compat/test_transport.py.

2. Highwaters under exactly_once come from the broker. Faust reads them from
   ``last_stable_offset``, which aiokafka only learns from a fetch response and reports as -1
   before one; table recovery then takes -1 for the end of a changelog it has not fetched yet
   and fails its consistency check. A ListOffsets request made by a read_committed consumer
   (Faust's consumer is one under exactly_once) answers with the last stable offset itself.
   Delete when Faust reads highwaters with ListOffsets, or aiokafka knows the LSO before a
   fetch. Test: tests/integration/test_recovery_end.py (a worker with no state, exactly_once).

3. Under exactly_once a commit happens between records only (see `Consumer`).
   Delete when Faust's exactly_once commit waits for the records it handed out and flushes the
   table buffer. Test: tests/integration/test_adclick_demo.py (exactly_once, 0 duplicated).

4. After a rebalance, a stream partition with nothing committed goes back to where
   ``auto_offset_reset`` says, as a partition with a committed offset goes back to it (see
   ``ConsumerThread._seek_to_committed_or_reset``): aiokafka left it where records fetched and
   then dropped by the rebalance had taken it, and those records were never processed.
   Delete when aiokafka's ``seek_to_committed`` resets partitions that have no committed
   offset. Test: tests/integration/test_seek_without_commit.py.

5. Stream partitions resume after the seek to their committed offsets and after the flow
   resumed, not before (see ``Consumer.resume_partitions``, ``release_streams_after_seek``);
   within one generation a stream record is handed to the streams once (see
   ``streamapp.hand_out``): a record fetched again is dropped instead of processed twice. Only
   recovery's seek counts, never the fetch loop's. Delete when Faust's recovery seeks the
   stream partitions before it resumes them, and resumes them after its flow.
   Tests: tests/unit/streamapp/test_hand_out.py; tests/integration/test_recovery_end.py.

6. A changelog record fetched under a previous generation is dropped, not handed to table
   recovery (see ``streamapp.faust_compat.recovery``). Delete when Faust's recovery asks
   which generation fetched a record. Test: tests/integration/test_rolling_restart_state.py.

7. Records fetched for a partition that is not active when they arrive are not dropped while
   aiokafka's position passes them: the partition goes back to the first of them (see
   ``Consumer._getmany``). Delete when Faust's getmany hands aiokafka the partitions it will
   keep records of. Test: tests/unit/streamapp/test_hand_out.py.

8. Faust's livelock check skips a partition that has no position yet (awaiting an offset
   reset) instead of crashing the worker on aiokafka's assertion (see
   ``ConsumerThread.verify_event_path``). Delete when Faust's livelock check reads positions
   only where there is one. Test: tests/unit/streamapp/faust_compat/test_livelock_check.py.

9. A revocation commits what was processed (at-least-once too; see
   ``Consumer.on_partitions_revoked``): Faust forgot it, and the next owner processed it again.
   Delete when Faust commits acked offsets before it forgets revoked partitions (or with the
   cooperative protocol, for what is revoked). Test: tests/integration/test_revocation_commits.py.

10. The fetch loop counts the fetches it begins (``Consumer.fetches_started``): one that begins
    has handed every record of the one before to its queue, which is how table recovery knows
    that what aiokafka's position has passed has reached the changelog queue (see
    ``streamapp.faust_compat.recovery``). Delete with recovery's end-offset probe, when
    Faust's recovery ends on the consumer's position. Test: tests/integration/test_recovery_end.py.

11. A gap in a partition's offsets no longer holds its commits back (``Consumer._add_gap``):
    Faust's fetch loop records the gap including the record after it. Delete when Faust
    records ``offset_to - 1``: under a Faust fix this one would leave an offset out of the gap
    and hold commits back at it (the pinned-version check at import stops that).
    Test: tests/unit/streamapp/faust_compat/test_commit_gaps.py.

12. The fetch loop hands a record to the streams without a task per record, when the hand-out
    has nothing to wait for (``Consumer.wait_first``; see
    ``streamapp.faust_compat.eager_hand_out``, which says when to delete it).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterable, Mapping
from contextvars import ContextVar
from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, Message
from faust.types.transports import TPorTopicSet
from mode.services import WaitResults

from streamapp.faust_compat import static_membership
from streamapp.faust_compat.eager_hand_out import AHEAD_LIMIT, eager_wait_first, is_coroutine_of
from streamapp.hand_out import HandOutLedger

#: True in the task of Faust's fetch loop (set by `Consumer.getmany`); a context variable, so
#: the tasks recovery runs its seeks in (mode's ``wait_first`` makes new ones) never see it.
IN_FETCH_LOOP: ContextVar[bool] = ContextVar("streamapp_in_fetch_loop", default=False)


class ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        if self._assignor is not self.app.assignor:
            self._assignor = self.app.assignor
            # aiokafka 0.14 reads this in start() to build its GroupCoordinator.
            consumer._partition_assignment_strategy = [self._assignor]
        instance_id = self.app.conf.consumer_group_instance_id
        if instance_id is not None:  # a static member: it leaves on a stop, stops once fenced
            static_membership.install(consumer, self.app.conf.id, instance_id)
        return consumer

    async def seek_to_committed(self) -> Mapping[TP, int]:
        committed: Mapping[TP, int] = await self.call_thread(self._seek_to_committed_or_reset)
        return committed

    async def _seek_to_committed_or_reset(self) -> Mapping[Any, int | None]:
        # Faust calls this after every rebalance (and while its flow is stopped) to take each
        # partition back to its committed offset: records fetched but not processed (a batch cut
        # short when the flow stopped, queues cleared, skipped stale events) are dropped on the
        # way, and only this seek brings them back. aiokafka seeks only where the committed
        # offset is > 0, so a stream partition without one (nothing committed yet: a new group,
        # or a revocation right after the start, since Faust forgets the acked offsets of
        # revoked partitions before it commits) kept the position the dropped records had
        # advanced, and they were never processed by anyone. Those partitions go back to where
        # a consumer without a committed offset starts (auto_offset_reset).
        consumer = self._ensure_consumer()
        # aiokafka TopicPartition -> committed offset, or None where there is none.
        committed: dict[Any, int | None] = await consumer.seek_to_committed()
        changelogs = self.app.tables.changelog_topics
        acks_enabled_for = self.app.topics.acks_enabled_for
        at_zero, unset = [], []
        for tp, offset in committed.items():
            if tp.topic in changelogs or not acks_enabled_for(tp.topic):
                continue  # table recovery and standbys place changelog partitions themselves
            if offset == 0:
                at_zero.append(tp)
            elif offset is None or offset < 0:
                unset.append(tp)
        for tp in at_zero:
            consumer.seek(tp, 0)
        reset = self.app.conf.consumer_auto_offset_reset
        if unset and reset in ("earliest", "latest"):
            assignment = consumer._subscription.subscription.assignment
            moved = {}
            for tp in unset:
                state = assignment.state_value(tp)
                if state is not None and state.has_valid_position and state.position > 0:
                    moved[f"{tp.topic}[{tp.partition}]"] = state.position
            if moved:
                self.log.info(
                    "no committed offset: back to the %s offset from positions %s", reset, moved
                )
            if reset == "earliest":
                await consumer.seek_to_beginning(*unset)
            else:
                await consumer.seek_to_end(*unset)
        return committed

    async def _highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        # end_offsets honours the consumer's isolation level: the LSO under read_committed.
        ends = await self._ensure_consumer().end_offsets(partitions)
        return {TP(tp.topic, tp.partition): offset for tp, offset in ends.items()}

    def verify_event_path(self, now: float, tp: TP) -> None:
        # Faust's livelock check reads each partition's position from aiokafka, whose
        # ``TopicPartitionState.position`` asserts there is one: a partition awaiting an offset
        # reset (newly assigned with nothing committed, or sent back to its beginning by
        # `_seek_to_committed_or_reset`) has none for a moment, and the assertion crashed the
        # worker. There is nothing to verify on such a partition yet.
        subscription = self._ensure_consumer()._subscription.subscription
        if subscription is None:
            return None
        state = subscription.assignment.state_value(aiokafka.TopicPartition(tp.topic, tp.partition))
        if state is None or not state.has_valid_position:
            return None
        return super().verify_event_path(now, tp)


class Consumer(faust_aiokafka.Consumer):
    """Faust's consumer; under exactly_once, a commit happens only between records.

    Faust commits from its own task while agents keep processing, and table writes reach the
    transaction through a buffer that its exactly_once commit does not flush. A transaction could
    so commit the output of a record whose offset it does not commit (processed again after a
    crash: a duplicate), or commit an offset whose table writes land in the next transaction
    (lost if that one aborts). Kafka Streams commits between records in the processing thread;
    here a commit stops handing out records, waits until every record handed out (queued for a
    stream or in an agent) is processed (acked), flushes the buffer, and only then commits. A
    revocation commits and ends the transactions before Faust forgets the revoked offsets.
    Gaps in a partition's offsets (transaction markers) no longer hold its commits back.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._handing_out = asyncio.Event()
        self._hand_out_ledger = HandOutLedger()
        # Stream partitions Faust's recovery resumed before the seek that must precede them.
        self._streams_await_seek = False
        self._sought_for_streams = False
        self._resume_after_seek: set[TP] = set()
        self._refusals_logged: set[tuple[TP, int]] = set()
        #: Fetches Faust's fetch loop has begun (see the module docs, 9).
        self.fetches_started = 0
        self._handing_out.set()
        self._commit_lock = asyncio.Lock()
        hand_out = self.callback
        acks_enabled_for = self.app.topics.acks_enabled_for

        async def hand_out_between_commits(message: Message) -> None:
            await self._handing_out.wait()
            if acks_enabled_for(message.topic):  # a stream record (not a changelog's)
                if not self._admit(message):
                    return
                if not message.tracked:
                    # Faust's stream tracks a record only when it takes it from its queue;
                    # tracked here, records still queued count as handed out, and a commit
                    # waits for them.
                    message.tracked = True
                    self.track_message(message)
            elif message.generation_id != self.app.consumer_generation_id:
                # A changelog record fetched under the previous assignment: table recovery
                # counts what it takes without asking which generation fetched it, and seeks
                # every changelog partition it keeps afresh (see faust_compat.recovery, path 3).
                return
            await hand_out(message)

        # Faust's fetch loop hands every record to this callback (the conductor's on_message).
        self.callback = hand_out_between_commits
        self._hand_out = hand_out_between_commits
        #: Records the fetch loop handed out at once, and those that had to wait (the tests).
        self.handed_out_at_once = 0
        self.handed_out_waiting = 0

    async def wait_first(self, *coros: Any, timeout: Any = None) -> WaitResults:
        # Faust's fetch loop calls ``wait_first(callback(message), self.suspend_flow.wait())``
        # once per record: that call starts with the hand-out's first step at once, in the
        # fetch loop's task (module docs, 12). Every other call is mode's own.
        if (
            timeout is None
            and len(coros) == 2
            and is_coroutine_of(coros[0], self._hand_out)
            and IN_FETCH_LOOP.get()
        ):
            waited = await eager_wait_first(
                coros[0],
                coros[1],
                may_start=not (self.suspend_flow.is_set() or self.should_stop)
                and len(self.unacked) < AHEAD_LIMIT,
                wait_first=super().wait_first,
            )
            if waited is not None:
                self.handed_out_waiting += 1
                return waited
            self.handed_out_at_once += 1
            return WaitResults([coros[0]], [None], False)
        return await super().wait_first(*coros, timeout=timeout)

    def resume_partitions(self, tps: Iterable[TP]) -> None:
        # Faust's recovery resumes the stream partitions and then seeks them to their committed
        # offsets (`Recovery.on_recovery_completed`). Records the fetch loop took in between came
        # from positions the seek moves back: they were processed, fetched again after the seek
        # and processed again, their output repeated (under exactly_once too: both processings
        # can land in committed transactions). Stream partitions resume once that seek is done
        # and the flow resumed (`release_streams_after_seek`).
        tps = set(tps)
        if self._streams_await_seek:
            changelogs = self.app.tables.changelog_topics
            held = {tp for tp in tps if tp.topic not in changelogs}
            self._resume_after_seek |= held
            tps -= held
        super().resume_partitions(tps)

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        # Marks the fetch loop's task, for perform_seek (only Faust's fetch loop calls this).
        IN_FETCH_LOOP.set(True)
        # The fetch loop hands out one fetch's records before it begins the next.
        self.fetches_started += 1
        async for tp, message in super().getmany(timeout):
            yield tp, message

    async def _getmany(
        self, active_partitions: set[TP] | None, timeout: float
    ) -> Mapping[TP, list[Any]]:
        # Faust hands its live set of active partitions to the consumer thread, and aiokafka
        # returns every partition's buffered records when that set has emptied meanwhile (as
        # recovery pauses the actives), or records of a partition paused since. Faust's
        # getmany then drops the records of partitions no longer active without a word, while
        # aiokafka's position has passed them. A standby sought to its start whose first
        # records went that way resumed ~1,000 records further on, and its offset claimed them
        # all (issue 11). Such records go back: their partition is sought to the first one.
        records = await super()._getmany(active_partitions, timeout)
        if active_partitions is None:
            return records
        buffered = self._buffered_partitions
        passed = {
            tp: batch[0].offset
            for tp, batch in records.items()
            if batch and tp not in active_partitions and tp not in buffered
        }
        if not passed:
            return records
        await self._thread.seek_wait(passed)
        return {tp: batch for tp, batch in records.items() if tp not in passed}

    async def perform_seek(self) -> None:
        # Only recovery's seek, which starts after recovery asked for the resume, counts for
        # the stream partitions held. Faust's fetch loop seeks too, whenever it fetched while
        # the flow was stopped; were its seek to count (it may run between recovery's resume
        # and recovery's seek), records would flow while recovery's seek then moved every
        # partition back under them. Faust's gap detection took the offsets the seek moved
        # back over for gaps and acked them, and a record fetched before the seek and handed
        # out after it could pass records never handed out: acked, committed, never processed.
        recovery_seek = not IN_FETCH_LOOP.get() and bool(self._resume_after_seek)
        await super().perform_seek()
        if recovery_seek:
            self._sought_for_streams = True

    def release_streams_after_seek(self) -> None:
        """Resume the stream partitions held for recovery's seek, once it is done.

        Called by recovery once it has also resumed the flow (`faust_compat.recovery`), not
        at the end of the seek: resuming the flow empties every stream's queue, and a record
        fetched in between was put in one and dropped there, unprocessed and never acked,
        while the records after it were acked and committed past it (lost; seen under
        exactly_once when events arrived as a recovery ended).
        """
        if not (self._streams_await_seek and self._sought_for_streams):
            return
        held = self._resume_after_seek
        self._streams_await_seek = False
        self._sought_for_streams = False
        self._resume_after_seek = set()
        if held:
            super().resume_partitions(held & self.assignment())

    def _admit(self, message: Message) -> bool:
        """Whether a fetched stream record goes to the streams (see `streamapp.hand_out`)."""
        current = self.app.consumer_generation_id
        refusal = self._hand_out_ledger.admit(
            message.tp, message.offset, message.generation_id, current
        )
        if refusal is None:
            return True
        if (message.tp, current) not in self._refusals_logged:
            self._refusals_logged.add((message.tp, current))
            self.log.info(
                "%s[%d]@%d not handed out again: %s (first such record of this partition "
                "in generation %d)",
                message.topic,
                message.partition,
                message.offset,
                refusal.value,
                current,
            )
        return False

    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def commit(
        self, topics: TPorTopicSet | None = None, start_new_transaction: bool = True
    ) -> bool:
        if not self.in_transaction:
            return await super().commit(topics, start_new_transaction=start_new_transaction)
        async with self._commit_lock:
            was_open = self._handing_out.is_set()
            self._handing_out.clear()
            try:
                if not await self._all_handed_out_processed():
                    return False
                await self.app.producer.flush()
                return await super().commit(topics, start_new_transaction=start_new_transaction)
            finally:
                if was_open:
                    self._handing_out.set()

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        self._hand_out_ledger.forget(revoked)
        self._refusals_logged.clear()
        if revoked:
            # Nothing more is handed out until the assignment, and what was is processed now:
            # Faust's handler suspends the flow and clears the queues, and a record a fetch had
            # in hand at that moment (waiting for the producer buffer to ebb) could still land
            # in a queue after the clear, to be skipped by its stream, acked and committed
            # unprocessed.
            self._handing_out.clear()
            if self.in_transaction:
                # Faust forgets the acked offsets of revoked partitions before its handler
                # commits, so their transactions would stay open: a partition this worker keeps
                # would carry output of records it then processes again (duplicates). Commit
                # and end every transaction first.
                await self.commit(start_new_transaction=False)
            else:
                # Faust forgets the acked offsets of revoked partitions here and never commits
                # them on a revocation: everything processed since the last periodic commit
                # (up to a commit interval's worth) was processed again by the next owner,
                # and under an eager protocol every rebalance revokes everything. Kafka
                # Streams commits on revocation; so does this.
                # Acked offsets only advance over consecutive processed records, so what
                # they cover is safe to commit even if an agent is still stuck on a record.
                await self._all_handed_out_processed()
                await self._commit_all_acked()
        await super().on_partitions_revoked(revoked)

    async def _commit_all_acked(self) -> None:
        # Faust's commit returns without committing when another commit is in flight (it
        # waits for that one, which may have started before the last acks): let any such
        # commit finish first; nothing is handed out now, so this one covers every ack. (Faust's
        # ``_filter_committable_offsets`` consumes the acks it reads: not a question to ask.)
        await self.maybe_wait_for_commit_to_finish()
        await self.commit()

    async def on_partitions_assigned(self, assigned: set[TP], generation_id: int = 0) -> None:
        self._streams_await_seek = True
        self._sought_for_streams = False
        self._resume_after_seek = set()
        self._handing_out.set()
        await super().on_partitions_assigned(assigned, generation_id)

    async def _add_gap(self, tp: TP, offset_from: int, offset_to: int) -> None:
        # Faust's fetch loop passes the offset of the record after the gap as ``offset_to``, and
        # the gap it records includes it: merged into the acked offsets, that record is then
        # listed twice, which ends the run of consecutive offsets a commit may advance over.
        # On a topic with transaction markers (any topic written under exactly_once) every
        # commit then stopped at the next marker, and the committed offset fell further behind.
        await super()._add_gap(tp, offset_from, offset_to - 1)

    async def _all_handed_out_processed(self) -> bool:
        started = self.loop.time()
        deadline = started + max(self.commit_interval, 1.0) * 3
        while self._unacked_messages:
            if self.loop.time() > deadline:
                # An agent stuck on a record: committing now could split it across
                # transactions, so this commit is skipped; the next one tries again.
                self.log.warning(
                    "commit skipped: %d records handed out are still being processed, e.g. %s",
                    len(self._unacked_messages),
                    [
                        (m.topic, m.partition, m.offset, m.refcount, m.generation_id)
                        for m in list(self._unacked_messages)[:3]
                    ],
                )
                return False
            await self._wait_for_ack(timeout=1.0)
            self._clean_unacked_messages()
            if self._unacked_messages and self.loop.time() - started > 1.0:
                # A record dropped unprocessed (a queue cleared on stop) leaves the weak set
                # only once collected; Faust's wait_empty collects for the same reason.
                gc.collect()
        return True

    def all_progress_committed(self) -> bool:
        """Whether every input this worker processed is covered by a commit, none in flight.

        Asked once the consumer stopped: its last commit may have failed (Faust logs that and
        carries on), and only then do acked offsets remain past the committed ones.
        """
        if self._unacked_messages:
            return False
        return not self._filter_committable_offsets(list(self._acked))


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer
