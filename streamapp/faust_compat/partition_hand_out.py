"""A fetched partition's records of a batch topic handed out in one call per round.

Faust's fetch loop takes a fetch's records one at a time: its ``getmany`` makes each record's
message (``_to_message``), asks the consumer thread for the partition's ``highwater`` and goes
through the scheduler's merge; ``_drain_messages`` then checks the record against the
partition's read mark, notes gaps, commits every ``broker_commit_every`` acks and hands the
record out through ``wait_first(callback(message), self.suspend_flow.wait())``: two coroutines
made and closed per record even when `streamapp.faust_compat.batch_hand_out` does the hand-out
in one call. For an agent over batches that was about 28% of the loop thread
(docs/performance.md).

`PartitionHandOut` takes the records of a round (fix 25's bounds) as the fetch returns them,
before Faust's ``getmany`` iterates them, and for each partition of a topic an agent reads in
batches hands out its records in one call, in offset order, doing per record what the two
layers would: the message made by Faust's ``_to_message`` (stamped with the consumer's
generation), the read mark's check and update, the hand-out of `BatchHandOut` (the ledger's
admission, the tracking, the queue put with its pressure callbacks). What it checks once per
partition cannot change while it runs (the event loop runs nothing else meanwhile): the
partition is active or set aside for a full queue, no commit holds the hand-out, the partition
is not being given up, the conductor's lock is free, Faust's producer buffer is under its
limit, the fetch loop has no commit to make (``broker_commit_every``), the consumer is not
stopping and its flow runs. What can change meanwhile is checked per record: the consumer's
generation (set by the consumer thread as a rebalance assigns; a change drops the rest of the
fetch, as Faust's ``getmany`` does), the app's flow control, the records in hand
(`BATCH_AHEAD_LIMIT`) and the queue's room. Faust's ``getmany`` notes the partition's end
(``highwater``) for the monitor before each record; here once per partition, before its
records.

Anything unusual or that would wait stops the partition's run at that record: a record below
the read mark (Faust's loop drops it) or after a gap (Faust's loop notes the gap, awaiting),
a full queue, a record that does not decode with the resolved codecs (transport fix 19: it
takes Faust's whole path), the generation, the flow or the limit. That record and the rest of
the partition's records of the round are left to Faust's ``getmany`` and fetch loop, which
handle them record by record as before (`BatchHandOut` per record, else Faust's path), after
the records handed out here: a partition's records keep their offset order. Records of other
topics keep Faust's path and the scheduler's order among themselves.

Order across partitions: the partitions go out one after the other, in the order the
scheduler would reach their first records (`streamapp.scheduling`: by timestamp), where the
scheduler interleaved their records. A batch agent cuts what its queue holds into batches per
partition, in the order each partition first appears there (`streamapp.batches`), so its
batches come in the same order as before; a record-at-a-time agent never reads a batch topic
this way (a partition with two subscribed channels takes the usual path).

Faust private names this relies on (`streamapp.faust_compat.PRIVATE_NAMES`):
``faust.transport.drivers.aiokafka.Consumer._to_message``, and of
``faust.transport.consumer.Consumer``: ``_read_offset`` (the fetch loop's read mark),
``_commit_every``, ``_n_acked`` (its commit every so many acks) and ``_buffered_partitions``.
Delete when Faust's fetch loop hands a partition's records to the conductor in one call.
Tests: tests/unit/streamapp/faust_compat/test_partition_hand_out.py;
tests/integration/test_batch_agent.py, test_eager_hand_out.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faust.types import TP

from streamapp.faust_compat.batch_hand_out import BatchHandOut

#: Records a round leaves to Faust's fetch loop, per partition, in the order it gave them.
Records = Mapping[TP, list[Any]]


def _timestamp(record: Any) -> int:
    # What streamapp's scheduler (`streamapp.scheduling`) orders a fetch's records by.
    return int(getattr(record, "timestamp", 0) or 0)


class PartitionHandOut:
    """Hands out a round's records of the consumer's batch topics, a partition at a time (see
    the module); ``records`` is the consumer's `BatchHandOut`, ``batch_topics`` the topics
    read in batches (a live set) and ``ahead_limit`` the records in hand at which the fetch
    loop's per-record path takes over."""

    def __init__(
        self, consumer: Any, records: BatchHandOut, batch_topics: set[str], ahead_limit: int
    ) -> None:
        self.consumer = consumer
        self._records = records
        self._batch_topics = batch_topics
        self._ahead_limit = ahead_limit
        #: Records handed out (or refused by the ledger) here, and runs cut short (the tests).
        self.handed_out = 0
        self.cut_short = 0

    def __call__(self, records: Records, active_partitions: set[TP] | None) -> Records:
        """What of ``records`` (a round, as the fetch returned it) Faust's fetch loop still has
        to take: all of it but the runs handed out here; nothing when the consumer's generation
        moved on meanwhile (Faust's ``getmany`` drops the rest of a fetch then)."""
        batch_topics = self._batch_topics
        if not batch_topics or not any(tp.topic in batch_topics for tp in records):
            return records
        consumer = self.consumer
        if consumer.should_stop or not consumer.flow_active or consumer.suspend_flow.is_set():
            return records  # Faust's getmany returns, or seeks; its wait_first races the flow
        generation = consumer.app.consumer_generation_id
        batched = [tp for tp, batch in records.items() if batch and tp.topic in batch_topics]
        if len(batched) > 1:
            # In the order the scheduler would reach their first records (by timestamp, ties
            # in fetch order): a batch agent's wake-up cuts its queue into batches in the
            # order their partitions first appear there, as before.
            batched.sort(key=lambda tp: _timestamp(records[tp][0]))
        taken: dict[TP, int] = {}
        for tp in batched:
            done = self._partition(tp, records[tp], active_partitions, generation)
            if done is None:
                return {}
            taken[tp] = done
            if done < len(records[tp]):
                self.cut_short += 1
        return {
            tp: batch[taken[tp] :] if taken.get(tp) else batch
            for tp, batch in records.items()
            if taken.get(tp, 0) < len(batch)
        }

    def _partition(
        self, tp: TP, batch: list[Any], active_partitions: set[TP] | None, generation: int
    ) -> int | None:
        """Hands out ``batch`` (``tp``'s records of the round) from its first record on, while
        nothing would wait; how many it took (the rest is the usual path's), or None when the
        consumer's generation moved on."""
        consumer = self.consumer
        if (
            active_partitions is not None
            and tp not in active_partitions
            and tp not in consumer._buffered_partitions
        ):
            return 0  # Faust's getmany skips it
        commit_every = consumer._commit_every
        if commit_every is not None and consumer._n_acked >= commit_every:
            return 0  # the fetch loop commits before its next record
        target = self._records.target_for(tp)
        if target is None:
            return 0
        app = consumer.app
        app.monitor.track_tp_end_offset(tp, consumer.highwater(tp))
        read_offset = consumer._read_offset
        last: int | None = read_offset.get(tp)
        in_hand = len(consumer.unacked)
        ahead_limit = self._ahead_limit
        to_message = consumer._to_message
        put = self._records.put
        flow_is_active = self._records.flow_is_active
        done = 0
        for record in batch:
            if app.consumer_generation_id != generation:
                break
            if in_hand >= ahead_limit or not flow_is_active():
                break
            offset = record.offset
            if last is not None and (offset < last or (last and offset - last > 1)):
                break  # below the read mark (dropped), or after a gap (noted): Faust's loop
            if not put(target, to_message(tp, record)):
                break
            # Faust's loop moves the read mark over a record handed out or refused alike.
            last = offset
            done += 1
            in_hand += 1
        if done:
            read_offset[tp] = last
            self.handed_out += done
            consumer.handed_out_at_once += done
        if app.consumer_generation_id != generation:
            return None
        return done
