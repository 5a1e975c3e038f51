"""The broker reads the demo, its test and its benchmark need beyond streamapp.testing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from streamapp.testing.kafka_io import (
    create_topics,
    end_offsets,
    partition_counts,
    partitions_of,
)

__all__ = [
    "TopicRecord",
    "create_topics",
    "end_offsets",
    "group_lag",
    "latest_by_key",
    "partition_counts",
    "read_all",
    "uncommitted_records",
]


@dataclass(frozen=True)
class TopicRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


async def read_all(
    bootstrap: str, topic: str, *, read_committed: bool = False, timeout_s: float = 60.0
) -> list[TopicRecord]:
    """Every record of ``topic`` up to its end offsets as of now (last stable offset if
    ``read_committed``), in partition order."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed" if read_committed else "read_uncommitted",
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(await partitions_of(bootstrap, topic))]
        if not tps:
            return []
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        records: list[TopicRecord] = []
        remaining = {tp for tp in tps if ends[tp] > 0}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while remaining and loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=10_000)
            for msgs in batch.values():
                for m in msgs:
                    records.append(
                        TopicRecord(
                            m.topic,
                            m.partition,
                            m.offset,
                            m.timestamp,
                            m.key,
                            m.value,
                            tuple(m.headers or ()),
                        )
                    )
            for tp in list(remaining):
                # position() passes transaction markers too, which never come out as records.
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
        if remaining:
            raise TimeoutError(f"could not read {topic} to its end within {timeout_s:.0f} s")
        return records
    finally:
        await consumer.stop()


async def _committed(bootstrap: str, group_id: str) -> dict[TopicPartition, Any]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return dict(await admin.list_consumer_group_offsets(group_id))
    finally:
        await admin.close()


async def group_lag(bootstrap: str, group_id: str, topics: Iterable[str]) -> int:
    """Records in ``topics`` the consumer group has not committed yet (all partitions).

    By end offsets: on a topic written in transactions the commit markers count too, and the
    group never commits past a partition's last marker (see `uncommitted_records`)."""
    ends = await end_offsets(bootstrap, topics)
    committed = await _committed(bootstrap, group_id)
    lag = 0
    for tp, end in ends.items():
        meta = committed.get(tp)
        lag += max(0, end - (meta.offset if meta is not None and meta.offset >= 0 else 0))
    return lag


async def uncommitted_records(bootstrap: str, group_id: str, topics: Iterable[str]) -> int:
    """Committed records of ``topics`` at or after the group's committed offsets: what the group
    has still to process, transaction markers (which take offsets, not records) left out."""
    committed = await _committed(bootstrap, group_id)
    left = 0
    for topic in topics:
        for r in await read_all(bootstrap, topic, read_committed=True):
            meta = committed.get(TopicPartition(topic, r.partition))
            left += r.offset >= (meta.offset if meta is not None and meta.offset >= 0 else 0)
    return left


async def latest_by_key(bootstrap: str, topic: str) -> dict[bytes, bytes | None]:
    """The last value of every key of a (compacted) topic: what a table's changelog says."""
    latest: dict[bytes, bytes | None] = {}
    for record in await read_all(bootstrap, topic, read_committed=True):
        if record.key is not None:
            latest[record.key] = record.value
    return latest
