"""After a rebalance, a stream partition without a committed offset goes back to its beginning.

Faust takes every partition back to its committed offset after a rebalance (records fetched but
not processed are dropped on the way: a batch cut short when the flow stops, stream queues
cleared on resume). aiokafka's ``seek_to_committed`` does not move a partition whose committed
offset is missing or 0, so a worker that had fetched past such records kept going from there and
they were never processed: in the ad-click demo under load, a worker that took partitions from
the first one (which had not committed yet) skipped ~130 impressions a partition, and their
attributions were missing. Run against the session's real broker and a real group member, with
the seek a rebalance makes of the stream partitions it gains (`streamapp.runtime.positions`).

The same seek names the records of a partition whose committed offset lies below its log start
(deleted by retention or DeleteRecords before the group read them): aiokafka resets it to the
log start with an INFO line only, and they are never processed.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.structs import OffsetAndMetadata

from streamapp.runtime import positions
from streamapp.testing.kafka_io import create_topic

RECORDS = 20


async def _scenario(bootstrap: str) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    source, changelog = f"it-seek-{run}", f"it-seek-{run}-table-changelog"
    await create_topic(bootstrap, source, 2)
    await create_topic(bootstrap, changelog, 1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(RECORDS):
            for tp in (TopicPartition(source, 0), TopicPartition(source, 1)):
                await producer.send(tp.topic, b"x", key=str(i).encode(), partition=tp.partition)
            await producer.send(changelog, b"1", key=str(i).encode(), partition=0)
        await producer.flush()
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=f"it-seek-{run}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        consumer.subscribe([source, changelog])
        tps = {TopicPartition(source, 0), TopicPartition(source, 1), TopicPartition(changelog, 0)}
        # Partition 1 has offset 0 committed; partition 0 and the changelog have none.
        while consumer.assignment() != tps:
            await consumer.getmany(timeout_ms=200)
        await consumer.commit({TopicPartition(source, 1): OffsetAndMetadata(0, "")})
        # Fetched (as a worker's fetch loop does) but, say, dropped by a rebalance unprocessed.
        for _ in range(100):
            await consumer.getmany(timeout_ms=200)
            if all([await consumer.position(tp) == RECORDS for tp in tps]):
                break
        before = {str(tp): await consumer.position(tp) for tp in sorted(tps)}
        # The gained stream partitions, as a rebalance seeks them; table recovery and standbys
        # place changelog partitions themselves.
        streams = [TopicPartition(source, 0), TopicPartition(source, 1)]
        committed = await positions.seek_to_committed(consumer, streams, "earliest")
        after = {str(tp): await consumer.position(tp) for tp in sorted(tps)}
        again = await consumer.getmany(TopicPartition(source, 0), timeout_ms=2000)
        return {
            "source": source,
            "changelog": changelog,
            "before": before,
            "after": after,
            "committed": {str(tp): offset for tp, offset in committed.items()},
            "refetched": sum(len(records) for records in again.values()),
        }
    finally:
        await consumer.stop()


def test_partitions_without_committed_offset_go_back_to_their_beginning(
    kafka_bootstrap: str,
) -> None:
    r = asyncio.run(_scenario(kafka_bootstrap))
    p0 = str(TopicPartition(r["source"], 0))
    p1 = str(TopicPartition(r["source"], 1))
    cl = str(TopicPartition(r["changelog"], 0))
    assert r["before"] == {p0: RECORDS, p1: RECORDS, cl: RECORDS}
    assert r["committed"][p0] is None and r["committed"][p1] == 0
    # The stream partitions are read again from where nothing was committed...
    assert r["after"][p0] == 0
    assert r["after"][p1] == 0
    assert r["refetched"] > 0
    # ...while a changelog partition is left where table recovery or a standby put it.
    assert r["after"][cl] == RECORDS


async def _deleted_scenario(bootstrap: str) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    source = f"it-seek-deleted-{run}"
    await create_topic(bootstrap, source, 1)
    tp = TopicPartition(source, 0)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(RECORDS):
            await producer.send(source, b"x", key=str(i).encode(), partition=0)
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=f"it-seek-deleted-{run}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        consumer.subscribe([source])
        while consumer.assignment() != {tp}:
            await consumer.getmany(timeout_ms=200)
        # The group processed records 0..4; then the log start passes 5, as a retention check
        # does when the records' timestamps are older than retention.ms.
        await consumer.commit({tp: OffsetAndMetadata(5, "")})
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.delete_records({tp: RecordsToDelete(12)})
        finally:
            await admin.close()
        await positions.seek_to_committed(consumer, [tp], "earliest")
        first = None
        for _ in range(100):
            fetched = await consumer.getmany(tp, timeout_ms=200)
            if fetched.get(tp):
                first = fetched[tp][0].offset
                break
        return {"first": first}
    finally:
        await consumer.stop()


def test_records_deleted_before_the_group_read_them_are_named(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="streamapp.runtime.positions"):
        r = asyncio.run(_deleted_scenario(kafka_bootstrap))
    # aiokafka resets the position to the log start: records 5..11 are never read...
    assert r["first"] == 12
    # ...and the worker says so, once, naming them.
    warnings = [
        rec.getMessage() for rec in caplog.records if rec.name == "streamapp.runtime.positions"
    ]
    assert len(warnings) == 1
    assert "[0]: records 5 to 11 were deleted (retention or DeleteRecords)" in warnings[0]
