"""`streamapp.runtime.loop.FetchLoop`'s hand-out of a round's stream records to the conductor:
in the order of the app's scheduler (timestamps across partitions), each partition's records in
offset order, only dropped records twice, and a partition no longer streaming sought back."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import ConsumerRecord
from faust.types import TP

from streamapp.runtime.loop import FetchLoop
from streamapp.runtime.offsets import OffsetLedger
from streamapp.scheduling import TimestampOrderScheduling

A = TP("clicks", 0)
B = TP("impressions", 0)


def _record(tp: TP, offset: int, timestamp: int) -> ConsumerRecord[Any, Any]:
    return ConsumerRecord(
        topic=tp.topic,
        partition=tp.partition,
        offset=offset,
        timestamp=timestamp,
        timestamp_type=0,
        key=b"k",
        value=b"v",
        checksum=None,
        serialized_key_size=1,
        serialized_value_size=1,
        headers=(),
    )


class _Client:
    def __init__(self) -> None:
        self.sought: list[tuple[str, int, int]] = []

    def seek(self, tp: Any, offset: int) -> None:
        self.sought.append((tp.topic, tp.partition, offset))


def _loop(streaming: set[TP]) -> tuple[FetchLoop, list[tuple[TP, int]], list[Any]]:
    delivered: list[tuple[TP, int]] = []
    tracked: list[Any] = []

    async def callback(message: Any) -> None:
        delivered.append((message.tp, message.offset))

    app = SimpleNamespace(
        consumer_generation_id=3,
        topics=SimpleNamespace(acks_enabled_for=lambda topic: True),
    )
    consumer = SimpleNamespace(
        app=app,
        callback=callback,
        ledger=OffsetLedger(),
        scheduler=TimestampOrderScheduling(),
        stream_partitions=lambda: set(streaming),
        track_message=tracked.append,
    )
    loop = FetchLoop(consumer)  # type: ignore[arg-type]
    loop.client = _Client()  # type: ignore[assignment]
    return loop, delivered, tracked


@pytest.mark.asyncio
async def test_records_go_out_by_timestamp_across_partitions_in_offset_order_within() -> None:
    loop, delivered, tracked = _loop({A, B})
    await loop._hand_out(
        {
            A: [_record(A, 10, 500), _record(A, 11, 900)],
            B: [_record(B, 7, 100), _record(B, 8, 600), _record(B, 9, 1000)],
        }
    )
    assert delivered == [(B, 7), (A, 10), (B, 8), (A, 11), (B, 9)]
    assert [m.offset for m in tracked] == [7, 10, 8, 11, 9]
    assert all(m.generation_id == 3 for m in tracked)
    assert loop.handed_out == 5


@pytest.mark.asyncio
async def test_a_partition_no_longer_streaming_is_sought_back_not_handed_out() -> None:
    loop, delivered, _ = _loop({A})
    await loop._hand_out({A: [_record(A, 0, 1)], B: [_record(B, 4, 0), _record(B, 5, 2)]})
    assert delivered == [(A, 0)]
    assert loop.client.sought == [("impressions", 0, 4)]  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_after_a_drop_only_the_dropped_record_goes_out_again() -> None:
    loop, delivered, tracked = _loop({A})
    await loop._hand_out({A: [_record(A, 0, 1), _record(A, 1, 2), _record(A, 2, 3)]})
    # The stream's queue dropped offset 1 unprocessed (a flow stop): the partition is read
    # again from it, and offset 2, handed out already, is not handed out twice.
    ledger = loop.consumer.ledger
    assert ledger.drop(A, 1, tracked[1])
    assert ledger.rewind(A) is not None
    await loop._hand_out({A: [_record(A, 1, 2), _record(A, 2, 3), _record(A, 3, 4)]})
    assert delivered == [(A, 0), (A, 1), (A, 2), (A, 1), (A, 3)]
