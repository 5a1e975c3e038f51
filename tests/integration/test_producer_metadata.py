"""A worker's producer holding a record for a partition that is gone asks for metadata a
backoff apart, not as fast as the broker answers (streamapp.runtime.producer.refresh_spacing).

The producer sends a record to partition 3 of a topic after the topic was deleted (its metadata
still has the partition, so the record is taken and held): first while the topic is missing,
then while it is back with 2 partitions. Each time, the metadata answers its client applies
over a few seconds are counted: a refresh every ``retry_backoff_ms`` makes about
``WINDOW_S / backoff`` of them; aiokafka's sender alone asked again as each answer came, about
2,000 a second here. The bound is ten times the spaced count, so a loaded machine (slower
answers: fewer of them) cannot make it fail, and far below the unspaced rate. Then the topic
gets its 4 partitions back and the held record is delivered to partition 3.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic

from streamapp.runtime.producer.client import WorkerProducer
from streamapp.testing.kafka_io import partition_ends

BACKOFF_MS = 200
#: How long the metadata answers are counted, each time.
WINDOW_S = 3.0
#: Ten times the refreshes a backoff apart make in the window (the +1: the one at its start).
MOST_ANSWERS = 10 * (int(WINDOW_S * 1000 / BACKOFF_MS) + 1)


async def _admin(bootstrap: str) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    return admin


async def _delete(admin: AIOKafkaAdminClient, topic: str) -> None:
    await admin.delete_topics([topic])
    # Deletion completes asynchronously: wait until the topic is gone from the metadata.
    while topic in await admin.list_topics():
        await asyncio.sleep(0.2)


class _AnswerCount:
    """Metadata answers the producer's client applies (its cluster's ``update_metadata``)."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.answers = 0
        cluster: Any = producer.client.cluster
        update = cluster.update_metadata

        def counted(metadata: Any) -> Any:
            self.answers += 1
            return update(metadata)

        cluster.update_metadata = counted

    async def over_window(self) -> int:
        before = self.answers
        await asyncio.sleep(WINDOW_S)
        return self.answers - before


async def test_a_held_record_for_a_gone_partition_asks_metadata_a_backoff_apart(
    kafka_bootstrap: str,
) -> None:
    topic = f"producer-metadata-{uuid.uuid4().hex[:8]}"
    admin = await _admin(kafka_bootstrap)
    # The held record expires after the request timeout (aiokafka's producer keeps a batch no
    # longer): far beyond the test, and what ends it, and the producer's stop waiting for the
    # record, should the partition never be found again.
    producer = WorkerProducer(  # a streamapp worker's producer
        bootstrap_servers=kafka_bootstrap, retry_backoff_ms=BACKOFF_MS, request_timeout_ms=120_000
    )
    try:
        await admin.create_topics([NewTopic(topic, 4, 1)])
        await producer.start()
        await producer.send_and_wait(topic, b"before", partition=3)
        count = _AnswerCount(producer)

        await _delete(admin, topic)
        held = await producer.send(topic, b"held", partition=3)
        missing = await count.over_window()

        await admin.create_topics([NewTopic(topic, 2, 1)])
        shrunk = await count.over_window()
        held_while_gone = not held.done()

        # Partition 3 is back: the sender's next refresh finds it, and the held record goes.
        # (Before the counts are checked: a failed check leaves no record the stop waits for.)
        await admin.create_partitions({topic: NewPartitions(total_count=4)})
        delivered = await held
        assert delivered.partition == 3
        assert (await partition_ends(kafka_bootstrap, topic))[3] == 1

        assert held_while_gone, "the record for partition 3 is held while partition 3 is gone"
        assert 1 <= missing <= MOST_ANSWERS, (missing, MOST_ANSWERS)
        assert 1 <= shrunk <= MOST_ANSWERS, (shrunk, MOST_ANSWERS)
    finally:
        await producer.stop()
        await admin.close()
