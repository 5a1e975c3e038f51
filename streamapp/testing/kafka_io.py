"""The few broker operations streamapp's tests, benchmarks and demo need (aiokafka)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from streamapp.topic_check import read_partition_counts


async def create_topics(
    bootstrap: str, partitions: Mapping[str, int], configs: Mapping[str, str] | None = None
) -> None:
    """Create the topics that do not exist yet (with ``configs``); existing ones are left as they
    are (Faust creates its internal topics, not the sources of its agents).

    Args:
        bootstrap: The broker's bootstrap address.
        partitions: Topic name -> partition count; replication factor 1.
        configs: Topic configs for the topics created.

    Raises:
        aiokafka.errors.KafkaError: The broker refused to create one (a topic created
            concurrently by someone else is fine).
    """
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


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """`create_topics` for one topic."""
    await create_topics(bootstrap, {topic: partitions})


async def produce(bootstrap: str, topic: str, seqs: range, key_of: Callable[[int], str]) -> None:
    """One event per sequence number: key ``key_of(seq)``, value the number itself.

    Args:
        bootstrap: The broker's bootstrap address.
        topic: The topic to produce to (it must exist).
        seqs: The sequence numbers, one record each, in order.
        key_of: The record's key (a str, encoded as UTF-8) for a sequence number.
    """
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        for seq in seqs:
            await producer.send(topic, key=key_of(seq).encode(), value=str(seq).encode())
        await producer.flush()
    finally:
        await producer.stop()


class ProducedAroundAKill:
    """Produces ``seqs`` (as `produce`) on a thread of its own: the first ``before_kill`` of
    them at once, the rest only once `killed` is called. A test that kills a worker while it
    processes these can then never find it done with all of them before the kill, however
    fast it is. Use as a context manager: leaving it lets the thread finish (the rest is
    produced even if the test failed before the kill)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        seqs: range,
        key_of: Callable[[int], str],
        *,
        before_kill: int,
    ) -> None:
        self._gate = threading.Event()
        first, rest = seqs[:before_kill], seqs[before_kill:]

        def run() -> None:
            asyncio.run(produce(bootstrap, topic, first, key_of))
            self._gate.wait()
            asyncio.run(produce(bootstrap, topic, rest, key_of))

        self._thread = threading.Thread(target=run, name=f"produce {topic}", daemon=True)

    def __enter__(self) -> ProducedAroundAKill:
        self._thread.start()
        return self

    def killed(self) -> None:
        """The worker was killed: produce the rest, and wait until it is produced."""
        self._gate.set()
        self._thread.join()

    def __exit__(self, *exc: object) -> None:
        self.killed()


async def partitions_of(bootstrap: str, topic: str) -> set[int]:
    """The partitions of ``topic`` the broker has now (none if it does not exist)."""
    count = (await read_partition_counts(bootstrap, [topic])).get(topic, 0)
    return set(range(count))


async def partition_counts(bootstrap: str, topics: Iterable[str]) -> dict[str, int]:
    """Partition count of every topic that exists, from the broker's metadata."""
    return await read_partition_counts(bootstrap, topics)


async def end_offsets(bootstrap: str, topics: Iterable[str]) -> dict[TopicPartition, int]:
    """The end offset of every partition of ``topics`` (those that exist)."""
    counts = await read_partition_counts(bootstrap, topics)
    tps = [TopicPartition(t, p) for t, n in counts.items() for p in range(n)]
    if not tps:
        return {}
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        return dict(await consumer.end_offsets(tps))
    finally:
        await consumer.stop()


async def partition_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> end offset, for one topic."""
    return {tp.partition: end for tp, end in (await end_offsets(bootstrap, [topic])).items()}


async def committed_records(bootstrap: str, topic: str, partitions: int) -> list[ConsumerRecord]:
    """Every committed record of ``topic`` (read_committed), up to each partition's last stable
    offset as it is when the read begins: what an exactly_once output holds at that moment."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    out: list[ConsumerRecord] = []
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)  # the LSO, read_committed
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            batch = await consumer.getmany(*tps, timeout_ms=1000)
            for records in batch.values():
                out.extend(
                    r for r in records if r.offset < ends[TopicPartition(r.topic, r.partition)]
                )
    finally:
        await consumer.stop()
    return out
