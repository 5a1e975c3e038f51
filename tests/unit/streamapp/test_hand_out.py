"""Each stream record is handed to the streams once per generation (streamapp.hand_out)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from streamapp.faust_compat.transport import IN_FETCH_LOOP, Consumer
from streamapp.hand_out import HandOutLedger, Refusal

IMPRESSIONS = TP("impressions", 3)
CLICKS = TP("clicks", 3)


def test_records_in_offset_order_are_all_handed_out() -> None:
    ledger = HandOutLedger()
    assert [ledger.admit(IMPRESSIONS, o, 3, 3) for o in (540, 541, 542)] == [None] * 3
    # Offsets may jump (transaction markers, compaction): later ones always pass.
    assert ledger.admit(IMPRESSIONS, 550, 3, 3) is None
    assert ledger.refused == 0


def test_a_record_fetched_again_in_the_same_generation_is_refused() -> None:
    # The demo's case: the last record read of a partition came again after a commit.
    ledger = HandOutLedger()
    for offset in (540, 541, 542):
        ledger.admit(IMPRESSIONS, offset, 3, 3)
    assert ledger.admit(IMPRESSIONS, 542, 3, 3) is Refusal.ALREADY_HANDED_OUT
    assert ledger.admit(IMPRESSIONS, 530, 3, 3) is Refusal.ALREADY_HANDED_OUT
    assert ledger.admit(IMPRESSIONS, 543, 3, 3) is None
    # Partitions are independent.
    assert ledger.admit(CLICKS, 100, 3, 3) is None
    assert ledger.refused == 2


def test_a_new_generation_reads_from_its_committed_offset_again() -> None:
    # After a rebalance the partition is read again from the committed offset: those records
    # were not processed under the new generation and must all pass.
    ledger = HandOutLedger()
    for offset in range(500, 543):
        ledger.admit(IMPRESSIONS, offset, 3, 3)
    ledger.forget([IMPRESSIONS])
    assert ledger.admit(IMPRESSIONS, 520, 4, 4) is None
    # Even without forget (a partition kept across the rebalance), the generation decides.
    ledger.admit(CLICKS, 200, 3, 3)
    assert ledger.admit(CLICKS, 150, 4, 4) is None


def test_a_record_of_an_earlier_generation_is_refused() -> None:
    # Faust's stream would skip it and ack it unprocessed, letting a commit cover it.
    ledger = HandOutLedger()
    assert ledger.admit(IMPRESSIONS, 10, 3, 4) is Refusal.STALE_GENERATION
    # It is not counted as handed out: the same offset fetched in generation 4 passes.
    assert ledger.admit(IMPRESSIONS, 10, 4, 4) is None


def test_records_dropped_unprocessed_go_out_once_more_and_nothing_before_them() -> None:
    # Fix 27: 541 and 542 were handed out, then dropped from their queue unprocessed (543 was
    # handed out too, and taken by the agent as the queue was cleared).
    ledger = HandOutLedger()
    for offset in range(538, 544):
        ledger.admit(IMPRESSIONS, offset, 3, 3)
    ledger.rewind(IMPRESSIONS, [541, 542], 3)
    assert ledger.awaiting_dropped(IMPRESSIONS)
    # The rest of the round fetched before the seek back waits: it comes again behind them.
    assert ledger.admit(IMPRESSIONS, 544, 3, 3) is Refusal.AWAITING_DROPPED
    # After the seek back to 541: the dropped ones go out once, the rest in offset order.
    assert ledger.admit(IMPRESSIONS, 541, 3, 3) is None
    assert ledger.admit(IMPRESSIONS, 542, 3, 3) is None
    assert not ledger.awaiting_dropped(IMPRESSIONS)
    assert ledger.admit(IMPRESSIONS, 543, 3, 3) is Refusal.ALREADY_HANDED_OUT
    assert ledger.admit(IMPRESSIONS, 544, 3, 3) is None
    # Once only.
    assert ledger.admit(IMPRESSIONS, 541, 3, 3) is Refusal.ALREADY_HANDED_OUT
    # Other partitions never waited.
    assert ledger.admit(CLICKS, 7, 3, 3) is None


def test_a_drop_during_a_seek_backs_refetch_keeps_offset_order() -> None:
    # Dropped 541-546, sought back: 541 and 542 went out again and sat in the queue when a
    # second clear dropped them. The round fetched since that first seek goes on with 543,
    # which must wait for 541 and 542 (the cooperative scale-out's latest-value table once kept
    # an older value: 1041-1043 processed before 643-1040).
    ledger = HandOutLedger()
    for offset in range(538, 547):
        ledger.admit(IMPRESSIONS, offset, 3, 3)
    ledger.rewind(IMPRESSIONS, range(541, 547), 3)
    assert [ledger.admit(IMPRESSIONS, o, 3, 3) for o in (541, 542)] == [None, None]
    ledger.rewind(IMPRESSIONS, [541, 542], 3)
    assert ledger.admit(IMPRESSIONS, 543, 3, 3) is Refusal.AWAITING_DROPPED
    # The second seek back: all of them once, in offset order.
    assert [ledger.admit(IMPRESSIONS, o, 3, 3) for o in range(541, 548)] == [None] * 7
    assert not ledger.awaiting_dropped(IMPRESSIONS)


def test_records_below_the_dropped_ones_stay_handed_out() -> None:
    # The agent processed 538-540 before the clear: the seek back starts at 541, but a second
    # drop of the same partition may start lower (a later clear); each offset once anyway.
    ledger = HandOutLedger()
    for offset in range(538, 542):
        ledger.admit(IMPRESSIONS, offset, 3, 3)
    ledger.rewind(IMPRESSIONS, [541], 3)
    assert ledger.admit(IMPRESSIONS, 540, 3, 3) is Refusal.ALREADY_HANDED_OUT
    assert ledger.admit(IMPRESSIONS, 541, 3, 3) is None


def test_dropped_records_are_forgotten_with_their_partition_or_generation() -> None:
    ledger = HandOutLedger()
    for offset in range(10, 13):
        ledger.admit(IMPRESSIONS, offset, 3, 3)
        ledger.admit(CLICKS, offset, 3, 3)
    ledger.rewind(IMPRESSIONS, [11, 12], 3)
    ledger.rewind(CLICKS, [12], 3)
    # Revoked: its next owner reads from the committed offset; nothing waits here any more.
    ledger.forget([IMPRESSIONS])
    assert not ledger.awaiting_dropped(IMPRESSIONS)
    assert ledger.admit(IMPRESSIONS, 20, 4, 4) is None
    # A new generation (an eager rebalance sought every partition to its committed offset).
    assert ledger.admit(CLICKS, 10, 4, 4) is None
    assert not ledger.awaiting_dropped(CLICKS)
    assert ledger.admit(CLICKS, 11, 4, 4) is None


def _consumer(generation: int) -> Any:
    consumer: Any = object.__new__(Consumer)
    consumer.app = SimpleNamespace(consumer_generation_id=generation)
    consumer._hand_out_ledger = HandOutLedger()
    consumer._refusals_logged = set()
    consumer.log = logging.getLogger("test.hand_out")
    return consumer


def _message(tp: TP, offset: int, generation: int) -> Any:
    return SimpleNamespace(
        tp=tp, topic=tp.topic, partition=tp.partition, offset=offset, generation_id=generation
    )


def test_the_consumer_drops_a_second_delivery_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = _consumer(generation=3)
    assert consumer._admit(_message(IMPRESSIONS, 541, 3))
    assert consumer._admit(_message(IMPRESSIONS, 542, 3))
    with caplog.at_level(logging.INFO, logger="test.hand_out"):
        assert not consumer._admit(_message(IMPRESSIONS, 541, 3))
        assert not consumer._admit(_message(IMPRESSIONS, 542, 3))
    assert consumer._admit(_message(IMPRESSIONS, 543, 3))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "impressions[3]@541 not handed out again: handed out already in this generation "
        "(first such record of this partition in generation 3)"
    ]


STREAM = TP("impressions", 0)
CHANGELOG = TP("app-impressions-changelog", 0)


def _recovering_consumer() -> Any:
    # The state Faust's rebalance leaves: everything assigned, everything paused.
    consumer: Any = object.__new__(Consumer)
    consumer.app = SimpleNamespace(tables=SimpleNamespace(changelog_topics={CHANGELOG.topic}))
    consumer._active_partitions = set()
    consumer._paused_partitions = {STREAM, CHANGELOG}
    consumer._buffered_partitions = set()  # Faust's __init__ sets it; pausing reads it (fix 18)
    consumer._read_offset = {}
    consumer._committed_offset = {}
    consumer.assignment = lambda: {STREAM, CHANGELOG}
    consumer._streams_await_seek = True
    consumer._sought_for_streams = False
    consumer._resume_after_seek = set()
    active_at_seek: list[set[TP]] = []

    async def seek_to_committed() -> dict[TP, int]:
        active_at_seek.append(set(consumer._active_partitions))
        return {STREAM: 120}

    consumer.seek_to_committed = seek_to_committed
    consumer.active_at_seek = active_at_seek
    return consumer


async def test_stream_partitions_resume_only_after_the_seek_and_the_flow() -> None:
    consumer = _recovering_consumer()
    # Recovery resumes the changelogs as it always did...
    consumer.resume_partitions({CHANGELOG})
    assert consumer._active_partitions == {CHANGELOG}
    # ...and the stream partitions right before its seek: held back, nothing to fetch from.
    consumer.resume_partitions({STREAM})
    assert STREAM not in consumer._active_partitions
    await consumer.perform_seek()
    # The seek ran with the stream partition still paused, and it stays paused until
    # recovery has resumed the flow: that resume empties the streams' queues, and a record
    # fetched before it was dropped there unprocessed, and committed past.
    assert consumer.active_at_seek == [{CHANGELOG}]
    assert STREAM not in consumer._active_partitions
    consumer.release_streams_after_seek()
    assert consumer._active_partitions == {CHANGELOG, STREAM}
    assert STREAM not in consumer._paused_partitions
    assert consumer._read_offset[STREAM] == 120
    # Until the next assignment, resuming is Faust's again.
    consumer.pause_partitions({STREAM})
    consumer.resume_partitions({STREAM})
    assert STREAM in consumer._active_partitions


async def test_a_seek_before_the_resume_does_not_release_it() -> None:
    # Faust's fetch loop may seek while the flow is stopped, before recovery asked for the
    # stream partitions: that seek does not count as theirs.
    consumer = _recovering_consumer()
    await consumer.perform_seek()
    consumer.resume_partitions({STREAM})
    consumer.release_streams_after_seek()
    assert STREAM not in consumer._active_partitions
    await consumer.perform_seek()
    consumer.release_streams_after_seek()
    assert STREAM in consumer._active_partitions


async def test_a_seek_from_another_task_after_the_resume_does_not_release_it() -> None:
    # Faust's fetch loop seeks from its own task whenever it fetched while the flow was
    # stopped, and may do so between recovery's resume and recovery's own seek. Were that
    # seek to release the stream partitions, records would flow while recovery's seek then
    # moved every partition back under them (offsets taken for gaps, acked unprocessed).
    consumer = _recovering_consumer()
    consumer.resume_partitions({STREAM})

    async def fetch_loop_seek() -> None:
        IN_FETCH_LOOP.set(True)  # as Consumer.getmany marks the fetch loop's task
        await consumer.perform_seek()

    await asyncio.create_task(fetch_loop_seek())
    consumer.release_streams_after_seek()
    assert STREAM not in consumer._active_partitions
    # Recovery's seek, in a task of its own as mode's wait_first runs it.
    await asyncio.create_task(consumer.perform_seek())
    consumer.release_streams_after_seek()
    assert STREAM in consumer._active_partitions
    assert consumer.active_at_seek == [set(), set()]


async def test_records_of_a_partition_not_active_send_it_back_to_the_first_of_them() -> None:
    # aiokafka returns every partition's records when the live set Faust handed it emptied
    # meanwhile; Faust's getmany then dropped the ones not active while aiokafka's position
    # passed them: a standby sought to 0 resumed ~1,000 records further on.
    consumer: Any = object.__new__(Consumer)
    consumer._buffered_partitions = set()
    consumer._dropped_seek_back = {}
    sought: list[dict[TP, int]] = []
    fetched = {
        STREAM: [SimpleNamespace(offset=7), SimpleNamespace(offset=8)],
        CHANGELOG: [SimpleNamespace(offset=0), SimpleNamespace(offset=1)],
    }

    async def getmany(active: set[TP] | None, timeout: float) -> dict[TP, list[Any]]:
        return fetched

    async def seek_back(offsets: dict[TP, int], taken_to: Any = None) -> None:
        # Where the fetch left the partitions goes along: a seek since wins (see below).
        assert taken_to == {CHANGELOG: 2}
        sought.append(dict(offsets))

    consumer._thread = SimpleNamespace(
        getmany=getmany, seek_back=seek_back, positions_after_fetch={CHANGELOG: 2}
    )
    records = await consumer._getmany({STREAM}, 1.0)
    assert set(records) == {STREAM}
    assert sought == [{CHANGELOG: 0}]
    # Records of a partition Faust's flow control parked (buffer full) are still handed out.
    consumer._buffered_partitions = {CHANGELOG}
    sought.clear()
    assert set(await consumer._getmany({STREAM}, 1.0)) == {STREAM, CHANGELOG}
    assert sought == []


async def test_a_partition_given_up_meanwhile_is_not_sought_back() -> None:
    # An incremental rebalance gave a changelog partition up while its records were on their
    # way: aiokafka's seek of a partition not assigned raises IllegalStateError, which crashed
    # the fetch loop and the worker (test_cooperative_upgrade's w2). Its records go nowhere.
    from aiokafka import TopicPartition
    from aiokafka.errors import IllegalStateError

    from streamapp.faust_compat.transport import ConsumerThread

    sought: list[dict[TP, int]] = []

    class _Aiokafka:
        def assignment(self) -> set[TopicPartition]:
            return {TopicPartition(STREAM.topic, STREAM.partition)}

    async def seek_wait(consumer: Any, offsets: dict[TP, int]) -> None:
        for tp in offsets:
            if tp not in consumer.assignment():
                raise IllegalStateError(f"No current assignment for partition {tp}")
        sought.append(dict(offsets))

    thread: Any = object.__new__(ConsumerThread)
    thread._ensure_consumer = _Aiokafka
    thread._seek_wait = seek_wait
    await thread._seek_back_assigned({CHANGELOG: 0, STREAM: 7})
    assert sought == [{STREAM: 7}]
    sought.clear()
    await thread._seek_back_assigned({CHANGELOG: 0})
    assert sought == []


async def test_a_partition_given_up_while_its_seek_waits_is_left_and_the_rest_sought() -> None:
    # The seek back waits for the new positions (aiokafka's position, in Faust's _seek_wait),
    # and a cooperative rebalance can release the partition meanwhile: position then raised
    # IllegalStateError and the fetch loop crashed the worker (bench/rebalance.py, a ticks
    # partition given up). It has nothing to go back to; the others are sought again.
    from aiokafka import TopicPartition
    from aiokafka.errors import IllegalStateError

    from streamapp.faust_compat.transport import ConsumerThread

    assigned = {TopicPartition(STREAM.topic, STREAM.partition), CHANGELOG}
    sought: list[dict[TP, int]] = []

    class _Aiokafka:
        def assignment(self) -> set[Any]:
            return set(assigned)

    async def seek_wait(consumer: Any, offsets: dict[TP, int]) -> None:
        sought.append(dict(offsets))
        if CHANGELOG in offsets:
            assigned.discard(CHANGELOG)  # released while the seek waited
            raise IllegalStateError(f"Partition {CHANGELOG} is not assigned")

    thread: Any = object.__new__(ConsumerThread)
    thread._ensure_consumer = _Aiokafka
    thread._seek_wait = seek_wait
    await thread._seek_back_assigned({CHANGELOG: 0, STREAM: 7})
    assert sought == [{CHANGELOG: 0, STREAM: 7}, {STREAM: 7}]


async def test_a_seek_since_the_fetch_is_not_undone_by_its_seek_back() -> None:
    # The records of a changelog partition came back from a fetch after a rebalance paused it;
    # meanwhile the rebalance's recovery sought it to its store's offset. The seek back to
    # the first of those records, queued after that seek, moved it past the records between:
    # a newcomer's global table would lack them for good, its offset at the end.
    from aiokafka import TopicPartition
    from aiokafka.consumer.subscription_state import SubscriptionState

    from streamapp.faust_compat.transport import ConsumerThread

    subscription = SubscriptionState()
    subscription.subscribe({CHANGELOG.topic, STREAM.topic})
    subscription.assign_from_subscribed(
        {TopicPartition(tp.topic, tp.partition) for tp in (CHANGELOG, STREAM)}
    )
    states = subscription.subscription.assignment
    sought: list[dict[TP, int]] = []

    class _Aiokafka:
        _subscription = subscription

        def assignment(self) -> set[Any]:
            return set(subscription.assigned_partitions())

    async def seek_wait(consumer: Any, offsets: dict[TP, int]) -> None:
        sought.append(dict(offsets))

    thread: Any = object.__new__(ConsumerThread)
    thread._ensure_consumer = _Aiokafka
    thread._seek_wait = seek_wait
    # The fetch returned the changelog's 232..399 (position 400) and the stream's 7..9.
    taken_to = {CHANGELOG: 400, STREAM: 10}
    states.state_value(TopicPartition(CHANGELOG.topic, CHANGELOG.partition)).seek(1)  # since
    states.state_value(TopicPartition(STREAM.topic, STREAM.partition)).seek(10)  # unmoved
    await thread._seek_back_assigned({CHANGELOG: 232, STREAM: 7}, taken_to)
    assert sought == [{STREAM: 7}]


async def test_a_recovery_pass_a_newer_rebalance_overtook_does_not_resume_the_flow() -> None:
    # Faust's recovery carries on after a rebalance cut its wait for the replay's end short,
    # and resumed the flow in the middle of that rebalance, before its own pass had sought the
    # changelogs: the fetch loop set read marks from records of no pass's choosing, and a
    # newcomer's global table lost the records below them (transport fix 29).
    signal = asyncio.Event()
    consumer: Any = object.__new__(Consumer)
    consumer.app = SimpleNamespace(
        tables=SimpleNamespace(recovery=SimpleNamespace(signal_recovery_start=signal))
    )
    consumer.flow_active = False
    consumer.can_resume_flow = asyncio.Event()
    consumer.suspend_flow = asyncio.Event()
    consumer.suspend_flow.set()  # stopped by the rebalance's revocation
    signal.set()  # ... which asked for a pass that has not begun
    consumer.resume_flow()  # the overtaken pass
    assert not consumer.flow_active and consumer.suspend_flow.is_set()
    signal.clear()  # the new pass began (and has sought)
    consumer.resume_flow()
    assert consumer.flow_active and not consumer.suspend_flow.is_set()
