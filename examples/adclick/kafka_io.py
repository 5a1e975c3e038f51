"""The few broker operations the demo, its test and the benchmark need (aiokafka)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from streamapp.faust_compat.access import refresh_metadata


@dataclass(frozen=True)
class TopicRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


async def create_topics(
    bootstrap: str, partitions: Mapping[str, int], configs: Mapping[str, str] | None = None
) -> None:
    """Create the topics that do not exist yet (with ``configs``); existing ones are left as they
    are."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        new = [
            NewTopic(
                name=name, num_partitions=n, replication_factor=1, topic_configs=dict(configs or {})
            )
            for name, n in partitions.items()
            if name not in existing
        ]
        if new:
            # Created concurrently (another worker, Faust itself) is fine.
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(new)
    finally:
        await admin.close()


async def partition_counts(bootstrap: str, topics: Iterable[str]) -> dict[str, int]:
    """Partition count of every topic that exists, from the broker's metadata."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        counts: dict[str, int] = {}
        for topic in topics:
            parts = await _partitions_for(consumer, topic)
            if parts:
                counts[topic] = len(parts)
        return counts
    finally:
        await consumer.stop()


async def _partitions_for(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    await refresh_metadata(consumer)
    return consumer.partitions_for_topic(topic) or set()


async def end_offsets(bootstrap: str, topics: Iterable[str]) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [
            TopicPartition(t, p) for t in topics for p in sorted(await _partitions_for(consumer, t))
        ]
        return dict(await consumer.end_offsets(tps)) if tps else {}
    finally:
        await consumer.stop()


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
        tps = [TopicPartition(topic, p) for p in sorted(await _partitions_for(consumer, topic))]
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


async def group_lag(bootstrap: str, group_id: str, topics: Iterable[str]) -> int:
    """Records in ``topics`` the consumer group has not committed yet (all partitions)."""
    ends = await end_offsets(bootstrap, topics)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        committed = await admin.list_consumer_group_offsets(group_id)
    finally:
        await admin.close()
    lag = 0
    for tp, end in ends.items():
        meta = committed.get(tp)
        lag += max(0, end - (meta.offset if meta is not None and meta.offset >= 0 else 0))
    return lag


async def latest_by_key(bootstrap: str, topic: str) -> dict[bytes, bytes | None]:
    """The last value of every key of a (compacted) topic: what a table's changelog says."""
    latest: dict[bytes, bytes | None] = {}
    for record in await read_all(bootstrap, topic, read_committed=True):
        if record.key is not None:
            latest[record.key] = record.value
    return latest
