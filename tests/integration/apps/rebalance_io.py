"""Kafka I/O around the rebalance app, shared by its integration tests and its benchmark."""

from __future__ import annotations

from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    # Faust creates its internal topics, not the sources of its agents.
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, seqs: range, key_of: Callable[[int], str]) -> None:
    """One event per sequence number: key ``key_of(seq)``, value the number itself."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        for seq in seqs:
            await producer.send(topic, key=key_of(seq).encode(), value=str(seq).encode())
        await producer.flush()
    finally:
        await producer.stop()


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: ends[tp] for tp in tps}
    finally:
        await consumer.stop()
